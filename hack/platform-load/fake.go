package main

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// newFakeClient is a fake dynamic client holding objects, which lists and watches Challenges and
// ChallengeDefinitions.
func newFakeClient(objects []runtime.Object) *dynamicfake.FakeDynamicClient {
	gvr := func(resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: resource}
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		gvr("challenges"): "ChallengeList", gvr("challengedefinitions"): "ChallengeDefinitionList",
	}, objects...)
}
