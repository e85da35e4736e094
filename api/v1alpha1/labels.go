package v1alpha1

// LabelChallenge is the label the hook puts on every child of a Challenge, its name: the activity
// stamper watches the Services that carry it.
const LabelChallenge = Group + "/challenge"

// LabelOwner is spec.owner as a label, which the admission policy keeps equal to it: the hook
// counts an owner's instances by it, and a platform finds them by it.
const LabelOwner = Group + "/owner"
