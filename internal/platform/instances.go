package platform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// Store is what the component reads (from its informer cache) and writes (to the API server).
type Store interface {
	// Definitions are the ChallengeDefinitions whose AnnotationRCTFChallenge is id.
	Definitions(id string) []*v1alpha1.ChallengeDefinition
	// Instances are the Challenges of owner on the ChallengeDefinition namespace/definition.
	Instances(namespace, definition, owner string) []*v1alpha1.Challenge
	// Get reads a Challenge from the API server (the cache may not hold one just created).
	Get(ctx context.Context, namespace, name string) (*v1alpha1.Challenge, error)
	Create(ctx context.Context, challenge *v1alpha1.Challenge) (*v1alpha1.Challenge, error)
	// Patch applies a JSON merge patch.
	Patch(ctx context.Context, namespace, name string, mergePatch []byte) (*v1alpha1.Challenge, error)
	// Delete deletes in the background (the hook's finalizer removes the children first).
	Delete(ctx context.Context, namespace, name string) error
}

// Annotations the component writes on the Challenges it creates.
const (
	// annotationAttempt numbers a team's successive instances of one challenge: a new one is
	// created once the last expired, under a name of its own.
	annotationAttempt = v1alpha1.Group + "/rctf-attempt"
	// annotationExtendable is "false" on an instance rCTF said cannot be extended.
	annotationExtendable = v1alpha1.Group + "/rctf-extendable"
	// labelManagedBy names the component on its Challenges.
	labelManagedBy      = "app.kubernetes.io/managed-by"
	managedByPlatform   = "challenge-hook-platform"
	fieldManager        = "challenge-hook-platform"
	maxChallengePrefix  = 40
	challengeNameDigits = 12
)

// Instancer answers rCTF's four requests over Challenges.
type Instancer struct {
	store   Store
	clock   func() time.Time
	logger  *slog.Logger
	creates *teamRate
}

// NewInstancer serves rCTF from store; creates bounds each team's starts.
func NewInstancer(store Store, clock func() time.Time, logger *slog.Logger, creates RateLimit) *Instancer {
	return &Instancer{store: store, clock: clock, logger: logger, creates: newTeamRate(creates)}
}

// target is what a request names: the definition (resolved from the cache) and the team.
type target struct {
	definition *v1alpha1.ChallengeDefinition
	team       string
}

// resolve finds the definition the organizer marked with the request's challengeIntegrationId,
// and checks the team id: nothing else can be started.
func (s *Instancer) resolve(f *form) (target, *instancerError) {
	if errs := validation.IsValidLabelValue(f.TeamID); len(errs) > 0 {
		return target{}, refuse(http.StatusBadRequest, "teamId %q is no valid owner (a label value): %s", f.TeamID, strings.Join(errs, "; "))
	}
	defs := s.store.Definitions(f.ChallengeIntegrationID)
	switch len(defs) {
	case 0:
		return target{}, refuse(http.StatusNotFound,
			"no ChallengeDefinition is marked for challenge %q: the organizer adds the annotation %s: %q to the one it runs",
			f.ChallengeIntegrationID, v1alpha1.AnnotationRCTFChallenge, f.ChallengeIntegrationID)
	case 1:
		return target{definition: defs[0], team: f.TeamID}, nil
	}
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Namespace + "/" + d.Name
	}
	slices.Sort(names)
	return target{}, refuse(http.StatusConflict, "challenge %q names several ChallengeDefinitions (%s): the organizer keeps the annotation %s on one",
		f.ChallengeIntegrationID, strings.Join(names, ", "), v1alpha1.AnnotationRCTFChallenge)
}

// current is the team's latest instance of the definition (nil: none): the highest attempt, the
// newest on a tie.
func (s *Instancer) current(t target) *v1alpha1.Challenge {
	instances := s.store.Instances(t.definition.Namespace, t.definition.Name, t.team)
	var latest *v1alpha1.Challenge
	for _, c := range instances {
		if latest == nil || attemptOf(c) > attemptOf(latest) ||
			attemptOf(c) == attemptOf(latest) && latest.CreationTimestamp.Before(&c.CreationTimestamp) {
			latest = c
		}
	}
	return latest
}

func attemptOf(c *v1alpha1.Challenge) int {
	n, err := strconv.Atoi(c.Annotations[annotationAttempt])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// over says whether an instance is done for good: being deleted, or expired (an Expired instance
// never runs again; a start creates the next one).
func over(c *v1alpha1.Challenge) bool {
	return c.DeletionTimestamp != nil || c.Status.Phase == v1alpha1.PhaseExpired || c.Status.Phase == v1alpha1.PhaseTerminating ||
		c.Status.Phase == v1alpha1.PhaseDeleted
}

// Get answers the team's instance as it stands in the cache.
func (s *Instancer) Get(f *form) (details, *instancerError) {
	t, refused := s.resolve(f)
	if refused != nil {
		return details{}, refused
	}
	return describe(s.current(t), s.clock()), nil
}

// Create starts the team's instance, or answers the one that runs: a repeated start is the same
// instance. A stopped instance is started again (same host and flag); an expired one is replaced.
func (s *Instancer) Create(ctx context.Context, f *form) (details, *instancerError) {
	t, refused := s.resolve(f)
	if refused != nil {
		return details{}, refused
	}
	flag, refused := platformFlag(t.definition, f.Flags)
	if refused != nil {
		return details{}, refused
	}
	return s.start(ctx, t, time.Duration(*f.TimeoutMilliseconds)*time.Millisecond, f.Extendable, flag)
}

// start starts the team's instance of t, or answers the one that runs (see Create); timeout 0
// leaves the lifetime to the definition's timeout.
func (s *Instancer) start(ctx context.Context, t target, timeout time.Duration, extendable *bool, flag string) (details, *instancerError) {
	cur := s.current(t)
	if cur != nil && !over(cur) {
		return s.wake(ctx, cur)
	}
	if !s.creates.allow(t.team, s.clock()) {
		return details{}, refuse(http.StatusTooManyRequests, "team %s started too many instances lately: try again in a minute", t.team)
	}
	attempt := 1
	if cur != nil {
		attempt = attemptOf(cur) + 1
	}
	challenge := newChallenge(t, attempt, timeout, extendable, flag)
	created, err := s.store.Create(ctx, challenge)
	if apierrors.IsAlreadyExists(err) {
		// Another start of the same team won the race: its instance is this one.
		created, err = s.store.Get(ctx, challenge.Namespace, challenge.Name)
	}
	if err != nil {
		return details{}, s.apiFailure("create the instance", err)
	}
	s.logger.Info("instance created", slog.String("challenge", created.Namespace+"/"+created.Name), slog.String("team", t.team),
		slog.Int("attempt", attempt))
	if cur != nil && cur.DeletionTimestamp == nil {
		// The expired record is no use to rCTF; the new instance replaces it. Its deletion does
		// not hold the answer: a start costs one API round trip.
		go s.deleteReplaced(context.WithoutCancel(ctx), cur)
	}
	return describe(created, s.clock()), nil
}

// deleteReplaced deletes an expired instance that a new one replaced.
func (s *Instancer) deleteReplaced(ctx context.Context, c *v1alpha1.Challenge) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.store.Delete(ctx, c.Namespace, c.Name); err != nil && !apierrors.IsNotFound(err) {
		s.logger.Warn("could not delete the expired instance a new one replaced: delete it by hand", slog.String("challenge", c.Namespace+"/"+c.Name), slog.Any("error", err))
	}
}

// wake answers a start of an instance that exists: one stopped for idleness gets a fresh
// activity stamp, one stopped by the platform is started again; any other is answered as is.
func (s *Instancer) wake(ctx context.Context, cur *v1alpha1.Challenge) (details, *instancerError) {
	var patch map[string]any
	switch {
	case cur.Spec.Stopped:
		patch = map[string]any{"spec": map[string]any{"stopped": nil}}
	case cur.Status.Phase == v1alpha1.PhaseStopped && cur.Status.Reason == v1alpha1.ReasonIdle:
		patch = map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			v1alpha1.AnnotationLastActivity: s.clock().UTC().Format(time.RFC3339)}}}
	default:
		return describe(cur, s.clock()), nil
	}
	woken, err := s.patch(ctx, cur, patch)
	if err != nil {
		return details{}, s.apiFailure("start the instance again", err)
	}
	d := describe(woken, s.clock())
	d.Status = statusStarting // the hook has not seen the change yet
	return d, nil
}

// Renew moves the instance's expiry to timeoutMilliseconds from now, within its definition's
// maxLifetime (the hook caps it too), when rCTF said the challenge is extendable.
func (s *Instancer) Renew(ctx context.Context, f *form) (details, *instancerError) {
	t, refused := s.resolve(f)
	if refused != nil {
		return details{}, refused
	}
	return s.renew(ctx, t, time.Duration(*f.TimeoutMilliseconds)*time.Millisecond)
}

// renew moves the expiry of the team's instance of t to timeout from now (see Renew).
func (s *Instancer) renew(ctx context.Context, t target, timeout time.Duration) (details, *instancerError) {
	cur := s.current(t)
	if cur == nil || over(cur) {
		return describe(cur, s.clock()), nil
	}
	if cur.Annotations[annotationExtendable] == "false" {
		return details{}, refuse(http.StatusConflict, "this challenge cannot be extended")
	}
	now := s.clock()
	expiresAt := now.Add(timeout)
	if latest, ok := latestExpiry(cur, t.definition); ok && expiresAt.After(latest) {
		expiresAt = latest
	}
	renewed, err := s.patch(ctx, cur, map[string]any{"spec": map[string]any{"expiresAt": expiresAt.UTC().Format(time.RFC3339)}})
	if err != nil {
		return details{}, s.apiFailure("extend the instance", err)
	}
	d := describe(renewed, now)
	if d.TimeLeftMilliseconds != nil {
		// The status shows the old expiry until the hook's next sync: answer the new one.
		left := max(expiresAt.Sub(now).Milliseconds(), 0)
		d.TimeLeftMilliseconds = &left
	}
	return d, nil
}

// latestExpiry is the latest an instance may run: its creation plus its definition's maxLifetime.
func latestExpiry(c *v1alpha1.Challenge, def *v1alpha1.ChallengeDefinition) (time.Time, bool) {
	maxLifetime, err := time.ParseDuration(def.Spec.MaxLifetime)
	if err != nil || maxLifetime <= 0 {
		return time.Time{}, false
	}
	return c.CreationTimestamp.Add(maxLifetime), true
}

// Delete deletes the team's instance: its Pods go, then its record.
func (s *Instancer) Delete(ctx context.Context, f *form) (details, *instancerError) {
	t, refused := s.resolve(f)
	if refused != nil {
		return details{}, refused
	}
	return s.remove(ctx, t)
}

// remove deletes the team's instance of t (see Delete).
func (s *Instancer) remove(ctx context.Context, t target) (details, *instancerError) {
	cur := s.current(t)
	if cur == nil || cur.DeletionTimestamp != nil {
		return describe(cur, s.clock()), nil
	}
	if err := s.store.Delete(ctx, cur.Namespace, cur.Name); err != nil && !apierrors.IsNotFound(err) {
		return details{}, s.apiFailure("delete the instance", err)
	}
	s.logger.Info("instance deleted", slog.String("challenge", cur.Namespace+"/"+cur.Name), slog.String("team", t.team))
	return details{Kind: kindDetails, Status: statusStopping, TimeLeftMilliseconds: zeroMilliseconds(), Endpoints: []endpoint{}}, nil
}

func (s *Instancer) patch(ctx context.Context, c *v1alpha1.Challenge, patch map[string]any) (*v1alpha1.Challenge, error) {
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	return s.store.Patch(ctx, c.Namespace, c.Name, body)
}

// apiFailure logs what the API server refused and answers rCTF without its details (a player
// sees the message).
func (s *Instancer) apiFailure(what string, err error) *instancerError {
	s.logger.Error("the API server refused", slog.String("action", what), slog.Any("error", err))
	status := http.StatusBadGateway
	if apierrors.IsForbidden(err) {
		status = http.StatusForbidden
	}
	return refuse(status, "could not %s: the organizers' logs say why; try again in a minute", what)
}

// platformFlag is the flag the instance receives from rCTF: only for a definition whose flag
// says platform: true, which then needs one.
func platformFlag(def *v1alpha1.ChallengeDefinition, flags []teamFlag) (string, *instancerError) {
	if def.Spec.Flag == nil || !def.Spec.Flag.Platform {
		return "", nil
	}
	for _, f := range flags {
		if f.Flag != "" {
			if len(f.Flag) > v1alpha1.MaxFlagValue {
				return "", refuse(http.StatusBadRequest, "the team's flag is longer than %d bytes", v1alpha1.MaxFlagValue)
			}
			return f.Flag, nil
		}
	}
	return "", refuse(http.StatusBadRequest, "ChallengeDefinition %s/%s takes its flag from the platform (flag.platform: true), and the request has no flags: give the challenge a flag in rCTF",
		def.Namespace, def.Name)
}

// newChallenge is the team's instance: named after the definition and the team (so a repeated
// start is the same object and two teams never collide), owned by the team, living timeout (the
// hook caps it by the definition's maxLifetime; 0: the definition's timeout).
func newChallenge(t target, attempt int, timeout time.Duration, extendable *bool, flag string) *v1alpha1.Challenge {
	c := &v1alpha1.Challenge{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: "Challenge"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        challengeName(t.definition.Namespace, t.definition.Name, t.team, attempt),
			Namespace:   t.definition.Namespace,
			Labels:      map[string]string{v1alpha1.LabelOwner: t.team, labelManagedBy: managedByPlatform},
			Annotations: map[string]string{annotationAttempt: strconv.Itoa(attempt)},
		},
		Spec: v1alpha1.ChallengeSpec{
			DefinitionRef: &v1alpha1.DefinitionRef{Name: t.definition.Name},
			Owner:         t.team,
			Flag:          flag,
		},
	}
	if timeout > 0 {
		c.Spec.Timeout = timeout.String()
	}
	if extendable != nil && !*extendable {
		c.Annotations[annotationExtendable] = "false"
	}
	return c
}

// challengeName is <definition>-<12 hex digits of a hash of the definition and the team>, and
// -<attempt> after the first: a DNS-1035 label of at most 58 characters.
func challengeName(namespace, definition, team string, attempt int) string {
	sum := sha256.Sum256([]byte(namespace + "/" + definition + "\x00" + team))
	prefix := strings.ReplaceAll(definition, ".", "-")
	for strings.Contains(prefix, "--") {
		prefix = strings.ReplaceAll(prefix, "--", "-") // "--" separates a Challenge's name from its pods'
	}
	if len(prefix) > maxChallengePrefix {
		prefix = strings.TrimRight(prefix[:maxChallengePrefix], "-")
	}
	if prefix == "" || prefix[0] < 'a' || prefix[0] > 'z' {
		prefix = "i" + prefix
	}
	name := prefix + "-" + hex.EncodeToString(sum[:])[:challengeNameDigits]
	if attempt > 1 {
		name += "-" + strconv.Itoa(attempt)
	}
	return name
}
