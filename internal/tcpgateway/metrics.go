package tcpgateway

import "github.com/prometheus/client_golang/prometheus"

// Reasons a connection is refused: the values of the reason label of
// challenge_hook_tcp_gateway_refused_total.
const (
	reasonTooManyConnections = "too_many_connections"   // --max-connections reached with every connection spliced, or no descriptor left
	reasonEvicted            = "evicted"                // still presenting a token when a newcomer found every slot taken, of the source holding the most waiting beyond the instances it reached
	reasonClosedEarly        = "closed_early"           // closed by the player before its token or answer line
	reasonTokenTimeout       = "token_timeout"          // no token within --token-timeout
	reasonLineTooLong        = "line_too_long"          // a line longer than --max-line-bytes
	reasonInvalidToken       = "invalid_token"          // a token the gateway key did not mint
	reasonTooManyForToken    = "too_many_for_token"     // the instance's open connections reached --max-connections-per-token
	reasonWrongProofOfWork   = "wrong_proof_of_work"    // an answer that does not solve the puzzle (or none)
	reasonProofOfWorkTimeout = "proof_of_work_timeout"  // no answer within --proof-of-work-timeout
	reasonUnreachable        = "instance_not_reachable" // the instance refused or did not answer within --dial-timeout
	reasonNotAnInstance      = "not_an_instance"        // a signed token naming an address outside --service-cidrs
	reasonInternal           = "internal_error"         // the gateway could not pose a puzzle
	reasonRequestTooLarge    = "request_too_large"      // WebSocket listener: request headers past maxRequestBytes
	reasonBadRequest         = "bad_request"            // WebSocket listener: not an HTTP request, a URL of no token, or a bad upgrade
)

// Answers of the WebSocket listener: the values of the answer label of
// challenge_hook_tcp_gateway_websocket_requests_total.
const (
	answerUpgraded      = "upgraded"
	answerProbeFound    = "probe_found"
	answerProbeNotFound = "probe_not_found"
	answerBadRequest    = "bad_request"
	answerRefused       = "refused"
)

// Reasons a spliced connection ends: the values of the reason label of
// challenge_hook_tcp_gateway_closed_total.
const (
	closedByPeers       = "closed"       // both sides closed, or one reset
	closedIdle          = "idle_timeout" // no byte either way for --idle-timeout
	closedShutdown      = "shutdown"     // still open when the gateway's drain ended
	directionToInstance = "to_instance"
	directionToPlayer   = "to_player"
)

// Metrics are the gateway's Prometheus metrics.
type Metrics struct {
	accepted *prometheus.CounterVec
	refused  *prometheus.CounterVec
	spliced  prometheus.Counter
	closed   *prometheus.CounterVec
	open     prometheus.Gauge
	splicing prometheus.Gauge
	bytes    *prometheus.CounterVec
	sources  prometheus.GaugeFunc
	requests *prometheus.CounterVec // the WebSocket listener's HTTP requests, by answer

	// The children counted for every connection, looked up once.
	acceptedTracked, acceptedUntracked prometheus.Counter
	bytesToInstance, bytesToPlayer     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, sources func() float64) *Metrics {
	m := &Metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_tcp_gateway_connections_total",
			Help: "Connections accepted from players, by whether the source was tracked (untracked: the source table was full).",
		}, []string{"source"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_tcp_gateway_refused_total",
			Help: "Connections refused before reaching an instance, by reason.",
		}, []string{"reason"}),
		spliced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "challenge_hook_tcp_gateway_spliced_total",
			Help: "Connections spliced to their instance.",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_tcp_gateway_closed_total",
			Help: "Spliced connections ended, by reason (closed, idle_timeout, shutdown).",
		}, []string{"reason"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "challenge_hook_tcp_gateway_open_connections",
			Help: "Connections from players open now, spliced or still presenting a token (capped by --max-connections).",
		}),
		splicing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "challenge_hook_tcp_gateway_spliced_connections",
			Help: "Connections spliced to an instance now.",
		}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_tcp_gateway_bytes_total",
			Help: "Bytes spliced, by direction (to_instance, to_player).",
		}, []string{"direction"}),
		sources: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "challenge_hook_tcp_gateway_sources",
			Help: "Source addresses tracked for their debts (capped by --max-sources).",
		}, sources),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_tcp_gateway_websocket_requests_total",
			Help: "HTTP requests read on the WebSocket listener, by answer (upgraded, probe_found, probe_not_found, bad_request, refused: the other refusals are in challenge_hook_tcp_gateway_refused_total). Its connections count in the other metrics with the TCP listener's.",
		}, []string{"answer"}),
	}
	m.acceptedTracked, m.acceptedUntracked = m.accepted.WithLabelValues("tracked"), m.accepted.WithLabelValues("untracked")
	m.bytesToInstance, m.bytesToPlayer = m.bytes.WithLabelValues(directionToInstance), m.bytes.WithLabelValues(directionToPlayer)
	reg.MustRegister(m.accepted, m.refused, m.spliced, m.closed, m.open, m.splicing, m.bytes, m.sources, m.requests)
	return m
}
