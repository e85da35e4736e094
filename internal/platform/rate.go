package platform

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit is how many instances one team may create: Burst at once, then one every Every.
type RateLimit struct {
	Burst int
	Every time.Duration
}

// maxTrackedTeams bounds the teams whose starts are remembered: past it, those whose bucket is
// full again (they could start Burst now anyway) are forgotten.
const maxTrackedTeams = 100_000

// teamRate is a token bucket per team: a team that starts and deletes instances in a loop (each
// start creates a Challenge and its children) slows itself down, and no one else.
type teamRate struct {
	limit RateLimit
	mu    sync.Mutex
	teams map[string]*rate.Limiter
}

func newTeamRate(limit RateLimit) *teamRate {
	return &teamRate{limit: limit, teams: map[string]*rate.Limiter{}}
}

// allow takes one start of team at now from its bucket.
func (r *teamRate) allow(team string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	limiter, ok := r.teams[team]
	if !ok {
		if len(r.teams) >= maxTrackedTeams {
			r.forgetFull(now)
		}
		limiter = rate.NewLimiter(rate.Every(r.limit.Every), r.limit.Burst)
		r.teams[team] = limiter
	}
	return limiter.AllowN(now, 1)
}

// forgetFull forgets the teams whose bucket is full at now.
func (r *teamRate) forgetFull(now time.Time) {
	for team, limiter := range r.teams {
		if limiter.TokensAt(now) >= float64(r.limit.Burst) {
			delete(r.teams, team)
		}
	}
}
