// mkimage writes a docker-archive tarball (importable with `ctr -n k8s.io images import`)
// holding one static binary, without any registry or docker daemon:
//
//	mkimage -o out.tar -t local/ctfbox:v1 -bin /path/ctfbox -entrypoint /ctfbox,serve -user 65532:65532
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	out := flag.String("o", "image.tar", "output docker-archive tarball")
	tag := flag.String("t", "", "image reference, e.g. local/app:v1")
	bin := flag.String("bin", "", "binary to put into the image")
	dest := flag.String("dest", "/ctfbox", "path of the binary inside the image")
	ep := flag.String("entrypoint", "/ctfbox", "comma separated entrypoint")
	user := flag.String("user", "", "image user, e.g. 65532:65532")
	flag.Parse()
	data, err := os.ReadFile(*bin)
	if err != nil {
		log.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(0, 0)
	must := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	for _, d := range []string{"tmp/", "etc/"} {
		must(tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 01777, ModTime: mt}))
	}
	for _, f := range [][2]string{
		{"etc/passwd", "root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n"},
		{"etc/group", "root:x:0:\nnonroot:x:65532:\n"},
	} {
		must(tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0644, Size: int64(len(f[1])), ModTime: mt}))
		_, err = tw.Write([]byte(f[1]))
		must(err)
	}
	must(tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(*dest, "/"), Mode: 0755, Size: int64(len(data)), ModTime: mt}))
	_, err = tw.Write(data)
	must(err)
	must(tw.Close())
	b := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	must(err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	must(err)
	cf, err := img.ConfigFile()
	must(err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created.Time = mt
	cf.Config.Entrypoint = strings.Split(*ep, ",")
	cf.Config.User = *user
	cf.Config.Env = []string{"PATH=/"}
	img, err = mutate.ConfigFile(img, cf)
	must(err)
	ref, err := name.NewTag(*tag)
	must(err)
	must(tarball.WriteToFile(*out, ref, img))
	d, _ := img.Digest()
	log.Printf("wrote %s (%s) %s", *out, ref, d)
}
