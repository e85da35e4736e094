package sync

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

const (
	defaultFlagPrefix = "flag"
	// dynamicFlagHexLength is 128 bits of the HMAC: far beyond guessing, short enough to type.
	dynamicFlagHexLength = 32
)

// flagValue is the instance's flag. A dynamic flag is an HMAC, under the hook's key, of the
// definition and the owner: stable for one team on one challenge (so re-creating an instance keeps
// its flag), different for every team (so a shared flag names who leaked it).
func flagValue(in instance, cfg Config) string {
	f := in.template.Flag
	if !f.Dynamic {
		return f.Value
	}
	if len(cfg.FlagKey) == 0 {
		return cfg.DynamicFlagPlaceholder
	}
	mac := hmac.New(sha256.New, cfg.FlagKey)
	mac.Write([]byte(in.definitionKey()))
	mac.Write([]byte{0})
	mac.Write([]byte(in.owner))
	prefix := f.Prefix
	if prefix == "" {
		prefix = defaultFlagPrefix
	}
	return prefix + "{" + hex.EncodeToString(mac.Sum(nil))[:dynamicFlagHexLength] + "}"
}

// flagHash identifies the instance's flag without revealing it: the Pod carries it in an
// annotation, so that a changed flag changes the Pod and Metacontroller recreates it (a running
// container never sees a Secret's new value in its environment). The instance id salts it, so a
// weak static flag cannot be looked up in a table of precomputed hashes.
func flagHash(in instance, cfg Config) string {
	sum := sha256.Sum256([]byte(in.id + "\x00" + flagValue(in, cfg)))
	return hex.EncodeToString(sum[:])[:dynamicFlagHexLength]
}

// buildFlagSecret holds the flag the Pod receives as an environment variable or file; nil
// when the template has no flag. It uses data, not stringData: the API server stores only data, so
// stringData would differ from the live object on every sync.
func buildFlagSecret(in instance, cfg Config) *corev1ac.SecretApplyConfiguration {
	if in.template.Flag == nil {
		return nil
	}
	return corev1ac.Secret(in.flagSecretName(), in.namespace).
		WithLabels(in.labels).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{flagSecretKey: []byte(flagValue(in, cfg))})
}
