package sync

// AnswerWithEveryPod lets the external tests (package sync_test) sync an instance past the
// requests that create its NetworkPolicies and Services before its Pods, until every Pod of it is
// declared.
var AnswerWithEveryPod = answerWithEveryPod
