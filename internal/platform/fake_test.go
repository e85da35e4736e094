package platform

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// fakeStore is a Store in memory: the cache and the API server at once, with the number of
// writes of each kind.
type fakeStore struct {
	mu          sync.Mutex
	now         func() time.Time
	definitions []*v1alpha1.ChallengeDefinition
	challenges  map[string]*v1alpha1.Challenge // by namespace/name
	creates     int
	patches     int
	deletes     int
}

func newFakeStore(now func() time.Time, definitions ...*v1alpha1.ChallengeDefinition) *fakeStore {
	return &fakeStore{now: now, definitions: definitions, challenges: map[string]*v1alpha1.Challenge{}}
}

var challengesResource = schema.GroupResource{Group: v1alpha1.Group, Resource: "challenges"}

func (s *fakeStore) Definitions(id string) []*v1alpha1.ChallengeDefinition {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*v1alpha1.ChallengeDefinition
	for _, d := range s.definitions {
		if v, ok := d.Annotations[v1alpha1.AnnotationRCTFChallenge]; ok && v == id {
			out = append(out, d)
		}
	}
	return out
}

func (s *fakeStore) Instances(namespace, definition, owner string) []*v1alpha1.Challenge {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*v1alpha1.Challenge
	for _, c := range s.challenges {
		if keys, _ := instanceKeys(c); len(keys) == 1 && keys[0] == instanceKey(namespace, definition, owner) {
			out = append(out, c)
		}
	}
	return out
}

func (s *fakeStore) Get(ctx context.Context, namespace, name string) (*v1alpha1.Challenge, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.challenges[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(challengesResource, name)
	}
	return c, nil
}

func (s *fakeStore) Create(ctx context.Context, c *v1alpha1.Challenge) (*v1alpha1.Challenge, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := c.Namespace + "/" + c.Name
	if _, ok := s.challenges[key]; ok {
		return nil, fmt.Errorf("create: %w", apierrors.NewAlreadyExists(challengesResource, c.Name))
	}
	created := *c
	created.CreationTimestamp = metav1.NewTime(s.now())
	s.challenges[key] = &created
	s.creates++
	return &created, nil
}

// Patch applies a merge patch of the fields the component writes.
func (s *fakeStore) Patch(ctx context.Context, namespace, name string, mergePatch []byte) (*v1alpha1.Challenge, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.challenges[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(challengesResource, name)
	}
	var patch struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(mergePatch, &patch); err != nil {
		return nil, err
	}
	patched := *c
	patched.Annotations = map[string]string{}
	for k, v := range c.Annotations {
		patched.Annotations[k] = v
	}
	for k, v := range patch.Metadata.Annotations {
		patched.Annotations[k] = v
	}
	for k, v := range patch.Spec {
		switch k {
		case "stopped":
			patched.Spec.Stopped = v == true
		case "expiresAt":
			patched.Spec.ExpiresAt = v.(string)
		default:
			return nil, fmt.Errorf("the fake store patches no spec.%s", k)
		}
	}
	s.challenges[namespace+"/"+name] = &patched
	s.patches++
	return &patched, nil
}

func (s *fakeStore) Delete(ctx context.Context, namespace, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.challenges[namespace+"/"+name]
	if !ok {
		return apierrors.NewNotFound(challengesResource, name)
	}
	deleted := *c
	now := metav1.NewTime(s.now())
	deleted.DeletionTimestamp = &now
	s.challenges[namespace+"/"+name] = &deleted
	s.deletes++
	return nil
}

// sync plays the hook: it gives the Challenge namespace/name the status phase, with endpoints.
func (s *fakeStore) sync(key string, status v1alpha1.ChallengeStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := *s.challenges[key]
	c.Status = status
	s.challenges[key] = &c
}

// challenge is the Challenge at key, nil if none.
func (s *fakeStore) challenge(key string) *v1alpha1.Challenge {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.challenges[key]
}

// keys are the Challenges' keys, sorted by creation (then name).
func (s *fakeStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.challenges))
	for key := range s.challenges {
		out = append(out, key)
	}
	slices.SortFunc(out, func(a, b string) int {
		if c := s.challenges[a].CreationTimestamp.Compare(s.challenges[b].CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return out
}

func (s *fakeStore) writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates + s.patches + s.deletes
}
