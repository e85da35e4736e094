// Package cluster plays Metacontroller v4.17.2's part against a real API server: it watches
// CompositeControllers and, for each, the parents and children they name, calls the hooks over
// HTTP and applies their answers as Metacontroller does. It is a test double for the project's
// end-to-end tests (hack/metacontroller-sim runs it with Metacontroller's command line), never a
// controller for users: it ships in no image and no manifest.
//
// Each behaviour the tests rely on, and the Metacontroller v4.17.2 code it mirrors (read, not
// copied; ../shared/metacontroller.md states them):
//
//   - Controllers: every CompositeController that --target-label-selector selects runs, started
//     again when its generation changes and stopped when it goes; one whose resources discovery
//     does not know yet is retried every --discovery-interval (pkg/controller/composite/metacontroller.go).
//     [run.go]
//   - Queue and workers: one rate-limited work queue per controller, named
//     "CompositeController-<name>" (client-go's default controller rate limiter: 5 ms to 1000 s per
//     item, 10 a second overall), served by --workers goroutines; a parent is synced by one worker
//     at a time. The API client is limited by --client-go-qps and --client-go-burst.
//     (composite/controller.go: newParentController, processNextWorkItem) [controller.go]
//   - What enqueues a parent: its add, update and delete; with parentResource.ignoreStatusChanges
//     an update that changes neither generation, labels, annotations nor deletionTimestamp does
//     not (the resync's update, same object, does); a child's add, update (new resourceVersion)
//     or delete, found by its controller ownerReference; resyncPeriodSeconds (at least 1 s);
//     resyncAfterSeconds (AddAfter); a change of a related object a cached customize answer
//     selects. (composite/controller.go: updateParentObject, onChild*; customize/manager.go)
//     [controller.go, customize.go]
//   - Parent selection: parentResource.labelSelector; a parent that no longer matches but holds
//     the finalizer is finalized. (composite/controller.go: doNotMatchLabels, hooks.go) [parent.go]
//   - The finalizer "metacontroller.io/compositecontroller-<name>" when the controller has a
//     finalize hook: added (read, modify, update, retried on conflict) before the first sync of a
//     parent that is not being deleted; removed when the controller has none; the finalize hook is
//     called (finalizing: true) for a parent being deleted, and its finalized: true removes the
//     finalizer at once. Children are managed while deleting only while the finalizer is on and no
//     garbage collector finalizer is. (common/finalizer/finalizer.go, composite/controller.go:
//     syncParentObject) [parent.go]
//   - Children: found by controller ownerReference to the parent in its namespace (orphans are
//     not adopted); the request's children map has every child type, {} when empty, keyed
//     "<Kind>.<apiVersion>" and "<namespace>/<name>" (v2) or "<name>" (v1).
//     (composite/controller.go: claimChildren; common/api/v2) [children.go]
//   - Hooks: POST of {controller, parent, children, related, finalizing} with
//     Authorization: Bearer <token of the Secret webhook.authorization.secretRef names, read when
//     the controller starts>, the webhook's timeout (default 10 s); any status but 200 is an
//     error, 429's Retry-After delays the retry instead; v2 answers decode strictly; an error
//     skips the sync entirely, records a Warning event SyncError on the parent and retries with
//     the queue's backoff. (pkg/hooks/webhook.go, composite/controller.go: sync) [hook.go]
//   - Customize: called once per parent uid and generation, its answer cached; relatedResources
//     select by names (and namespace) or by labelSelector (and namespace); the related map has a
//     group for each rule, {} when nothing matched; a related informer not yet synced requeues
//     the parent. namespaceSelector is not simulated (an error says so).
//     (common/customize/manager.go) [customize.go]
//   - Applying an answer: children without a namespace go to the parent's; with generateSelector
//     each gets the label controller-uid: <parent uid>. Observed children the answer leaves out
//     are deleted (background propagation, uid precondition) unless already being deleted. A new
//     child is created with its last-applied annotation (the desired object) and a controller
//     ownerReference. An existing one is merged three ways (mcsim.Updated: pkg/dynamic/apply,
//     common.ApplyUpdate); when the merge changes it, the child type's updateStrategy decides:
//     OnDelete (the default) nothing, Recreate and RollingRecreate a delete (created again by a
//     later sync), InPlace and RollingInPlace an update; a child being deleted is not updated.
//     Rolling methods do not wait for a child's readiness here: the project declares none.
//     (common/manage_children.go: DynamicApply) [children.go]
//   - Status: a GET of the parent, then an update of /status, retried on conflict, only when the
//     answer's status with observedGeneration set differs from the stored one.
//     (composite/controller.go: updateParentStatus; dynamic/clientset: AtomicStatusUpdate) [parent.go]
//   - Log lines (JSON, one a line): "Sync" (verbosity 4) with object {namespace, name};
//     "Creating", "Updating", "Deleting child", "Deleting for update" with parent and child
//     {apiVersion, kind, namespace, name}, as the e2e tests read them. [log.go]
//   - Metrics on --metrics-address: metacontroller_<hook>_requests_total,
//     metacontroller_<hook>_request_duration_histogram_seconds and
//     metacontroller_<hook>_in_flight_requests per hook, and the work queues' workqueue_* series
//     with labels name and controller. (pkg/metrics, controller-runtime's workqueue metrics)
//     [metrics.go]
package cluster
