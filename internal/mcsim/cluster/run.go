package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
)

// compositeControllers is Metacontroller's CompositeController resource.
var compositeControllers = schema.GroupVersionResource{Group: "metacontroller.k8s.io", Version: "v1alpha1", Resource: "compositecontrollers"}

// Options configure a simulator run, as Metacontroller's flags do.
type Options struct {
	// Config reaches the API server; its QPS and Burst are --client-go-qps and --client-go-burst.
	Config *rest.Config
	// Workers sync parents of each controller (--workers).
	Workers int
	// DiscoveryInterval is how often the CompositeControllers and the API's resources are read
	// again (--discovery-interval).
	DiscoveryInterval time.Duration
	// Controllers selects the CompositeControllers to run by their labels (--target-label-selector).
	Controllers labels.Selector
	Log         *Logger
	Metrics     *Metrics
	// Ready is called once the first CompositeControllers were read.
	Ready func()
}

// clients are the API clients every controller shares.
type clients struct {
	dynamic dynamic.Interface
	// secret reads a Secret: a webhook's token.
	secret    func(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	discovery discovery.CachedDiscoveryInterface
	events    record.EventRecorder
}

// Run runs every selected CompositeController until ctx ends.
func Run(ctx context.Context, opts Options) error {
	dyn, err := dynamic.NewForConfig(opts.Config)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	// Core v1 and discovery only: the typed clientset of every API group is much to compile for
	// a Secret and events.
	core, err := typedcorev1.NewForConfig(opts.Config)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(opts.Config)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	events, stopEvents := newEventRecorder(core)
	defer stopEvents()
	secret := func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
		return core.Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	return run(ctx, clients{dynamic: dyn, secret: secret, discovery: memory.NewMemCacheClient(disco), events: events}, opts)
}

// run runs every selected CompositeController with the clients c until ctx ends.
func run(ctx context.Context, c clients, opts Options) error {
	running := map[string]*runningController{}
	defer func() {
		for _, r := range running {
			r.stop()
		}
	}()
	ready := false
	ticker := time.NewTicker(opts.DiscoveryInterval)
	defer ticker.Stop()
	for {
		if err := reconcileControllers(ctx, c, opts, running); err != nil {
			opts.Log.Error(err, "Reading CompositeControllers")
		} else if !ready && opts.Ready != nil {
			ready = true
			opts.Ready()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			c.discovery.Invalidate()
		}
	}
}

// runningController is a started controller and what it was started from.
type runningController struct {
	uid        string
	generation int64
	stop       func()
}

// reconcileControllers starts each selected CompositeController that does not run, starts again
// each whose spec changed, and stops each that is gone. A controller that cannot start (a
// resource discovery does not know yet) is tried again at the next round.
func reconcileControllers(ctx context.Context, c clients, opts Options, running map[string]*runningController) error {
	list, err := c.dynamic.Resource(compositeControllers).List(ctx, metav1.ListOptions{LabelSelector: opts.Controllers.String()})
	if err != nil {
		return fmt.Errorf("list CompositeControllers: %w", err)
	}
	seen := map[string]bool{}
	var errs []error
	for i := range list.Items {
		cc := &list.Items[i]
		seen[cc.GetName()] = true
		if r := running[cc.GetName()]; r != nil {
			if r.uid == string(cc.GetUID()) && r.generation == cc.GetGeneration() {
				continue
			}
			opts.Log.Info("Stopping CompositeController: its spec changed", "controller", cc.GetName())
			r.stop()
			delete(running, cc.GetName())
		}
		stop, err := startController(ctx, c, opts, cc)
		if err != nil {
			errs = append(errs, fmt.Errorf("CompositeController %s: %w", cc.GetName(), err))
			continue
		}
		running[cc.GetName()] = &runningController{uid: string(cc.GetUID()), generation: cc.GetGeneration(), stop: stop}
	}
	for name, r := range running {
		if !seen[name] {
			opts.Log.Info("Stopping CompositeController: it is gone", "controller", name)
			r.stop()
			delete(running, name)
		}
	}
	return errors.Join(errs...)
}

// startController starts cc's controller and returns what stops it.
func startController(ctx context.Context, c clients, opts Options, cc *unstructured.Unstructured) (func(), error) {
	pc, err := newParentController(ctx, c, opts, cc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pc.run(ctx)
	}()
	opts.Log.Info("Starting CompositeController", "controller", cc.GetName())
	return func() {
		cancel()
		wg.Wait()
	}, nil
}

// newEventRecorder records events as Metacontroller's recorder does (source "metacontroller"),
// and returns what stops it. Events are about parents, unstructured objects that name their own
// kind: the scheme needs no types.
func newEventRecorder(core typedcorev1.CoreV1Interface) (record.EventRecorder, func()) {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: core.Events("")})
	return broadcaster.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: "metacontroller"}), broadcaster.Shutdown
}
