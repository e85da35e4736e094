package v1alpha1

// LabelChallenge is the label the hook puts on every child of a Challenge, its name: the activity
// stamper watches the Services that carry it.
const LabelChallenge = Group + "/challenge"
