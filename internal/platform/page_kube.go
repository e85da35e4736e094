package platform

import (
	"k8s.io/client-go/tools/cache"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// Definition implements DefinitionGetter: the ChallengeDefinition namespace/name of the watches'
// cache; nil when it is absent or its namespace is none of the component's.
func (k *Kube) Definition(namespace, name string) *v1alpha1.ChallengeDefinition {
	informer, ok := k.definitions[namespace]
	if !ok {
		return nil
	}
	obj, found, _ := informer.GetIndexer().GetByKey(cache.ObjectName{Namespace: namespace, Name: name}.String())
	if !found {
		return nil
	}
	d, _ := obj.(*v1alpha1.ChallengeDefinition)
	return d
}
