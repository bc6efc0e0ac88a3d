"""Every bound Ledgerflow keeps, in one place (internal).

Nothing is unbounded: attempts, payloads, journals, batches and waits all have a stated limit,
named with its unit and ending in ``_MAX``/``_MIN`` where it is a ceiling or a floor.
"""

from __future__ import annotations

# A retry policy may not promise more attempts than this.
ATTEMPTS_MAX = 100
# A workflow input, step output or evidence payload, encoded.
PAYLOAD_BYTES_MAX = 1_000_000
# How deeply a JSON value given at an edge (a command's --input, an HTTP body) may nest:
# deeper input is refused with a clear error before a recursive parser could overflow.
JSON_DEPTH_MAX = 100
# How many values (array elements, object members) JSON given at an edge may hold: Python's
# parser holds the interpreter for a whole document, and a server's event loop with it, so a
# body's parse is bounded in time by this, not only in bytes by its size (100,000 empty lists
# parse in 15-25 ms; the 700,000 that fit in a 2 MB body took 150-470 ms).
JSON_VALUES_MAX = 100_000
# JSON a command reads from a file or stdin (--input @file, --payload -): the encoded payload
# is bounded by PAYLOAD_BYTES_MAX; this leaves room for the file's indentation.
JSON_INPUT_BYTES_MAX = 4 * PAYLOAD_BYTES_MAX
# Steps one run of an instance may journal; past this the instance is parked as poison (a
# loop that continues as new starts each run at none).
STEPS_PER_INSTANCE_MAX = 10_000
# A local step's result rides with the instance's next commit (runtime/session.py ride_step),
# but no more of them than this wait in memory, nor for longer (a crash reruns them all).
RIDING_STEPS_MAX = 64
RIDING_STEP_SECONDS_MAX = 1.0
# Runs one claim drives one after another when each continues as new (ctx.continue_as_new)
# without waiting; past it the lease is given back, due at once, so a chain that never waits
# takes turns with the other instances. STEPS_PER_INSTANCE_MAX bounds each run's journal.
RUNS_PER_CLAIM_MAX = 100
# Closed runs an instance's page (`ledgerflow show`, the API) lists: the latest ones.
RUNS_SHOWN_MAX = 20
# Children one run may have started and not yet awaited (fan-out): one more parks the parent
# (child_limit). It bounds the parent's inbox too: each open child delivers its ending there.
CHILDREN_OPEN_MAX = 1_000
# Instances one worker drives at once.
WORKER_CONCURRENCY_MAX = 1_000
WORKER_CONCURRENCY_DEFAULT = 64
# Instances claimed in one round trip.
CLAIM_BATCH_MAX = 64
# Instances' commits that share one durable transaction (group commit). It bounds how long
# the write lock is held and how long a commit queued behind a full batch waits.
GROUP_COMMIT_BATCH_MAX = 256
# Instances read in one statement when many result waiters look at once.
READ_BATCH_MAX = 500
# Leases: how long a claim holds without a heartbeat, and how often heartbeats go out.
LEASE_SECONDS_DEFAULT = 10.0
LEASE_SECONDS_MIN = 0.2
HEARTBEATS_PER_LEASE = 3
# The worker registry: heartbeats a worker sends per liveness bound (see DetectionBounds
# .worker_silent_seconds), how many definitions one worker may announce, how many workers a
# listing shows, and how long the row of a stopped or silent worker is kept before it is pruned.
WORKER_HEARTBEATS_PER_BOUND = 3
WORKER_DEFINITIONS_MAX = 10_000
WORKERS_LISTED_MAX = 1_000
WORKER_RETENTION_SECONDS = 7 * 24 * 3600
# `ledgerflow worker --processes N`: how many worker processes one supervisor keeps; a child
# that dies within the start bound counts as dying at start (an interpreter's imports alone
# take seconds on a loaded machine), and this many such deaths in a row
# end the supervisor (a bad registry or store, not a crash to ride out); restarts after an early
# death back off from the minimum, doubling, up to the maximum; how often the supervisor looks.
WORKER_PROCESSES_MAX = 64
SUPERVISOR_START_SECONDS = 30.0
SUPERVISOR_EARLY_DEATHS_MAX = 3
SUPERVISOR_RESTART_SECONDS_MIN = 0.5
SUPERVISOR_RESTART_SECONDS_MAX = 10.0
SUPERVISOR_POLL_SECONDS = 0.05
# How long an idle worker sleeps between looks at the store when nothing woke it.
POLL_SECONDS_DEFAULT = 0.2
# Push wake-ups (storage/wake_sources.py), with the poll as the floor: a process sends at most
# one PostgreSQL NOTIFY per window (rings within it share the next); a worker's listen probe
# waits this long for its NOTIFY before it falls back to polling; an idle SQLite worker reads
# PRAGMA data_version this often; a dropped listener reconnects after a pause doubled from the
# first to the last; closing waits this long for a source's thread.
WAKEUP_WINDOW_SECONDS = 0.002
WAKEUP_PROBE_SECONDS = 1.0
WAKEUP_WATCH_SECONDS = 0.002
WAKEUP_RECONNECT_SECONDS_MIN = 0.05
WAKEUP_RECONNECT_SECONDS_MAX = 2.0
WAKEUP_CLOSE_SECONDS_MAX = 2.0
# An effect dispatch that has not answered by then is UNKNOWN.
EFFECT_TIMEOUT_SECONDS_DEFAULT = 30.0
# Effect heartbeats (heartbeat_timeout=): writes per timeout at most (a throttle of
# timeout/3, so that one slow write never cuts an attempt off), capped at a minute (Temporal's
# cap), and the size of the details one heartbeat keeps.
HEARTBEAT_WRITES_PER_TIMEOUT = 3
HEARTBEAT_THROTTLE_SECONDS_MAX = 60.0
HEARTBEAT_DETAILS_BYTES_MAX = 64_000
# Errors of failed attempts kept per step or effect: the first and the most recent ones.
ATTEMPT_ERRORS_KEPT_MAX = 20
# A retry whose backoff is shorter than this waits in the worker; longer ones release the
# instance with a durable wake-up time so no worker holds it.
RETRY_INLINE_WAIT_SECONDS_MAX = 1.0
# Names: workflow, participant, operation, step names and business keys.
NAME_LENGTH_MAX = 200
BUSINESS_KEY_LENGTH_MAX = 500
# A participant contract version as declared on an effect (a small integer or a short name).
CONTRACT_VERSION_LENGTH_MAX = 40
# A workflow defect (an exception that is not a declared business failure) is tried again
# this many times in a row, with the step retry machinery's backoff, before the instance is
# parked ``workflow_defect``; and the traceback kept with it is cut to this many characters.
DEFECT_ATTEMPTS_DEFAULT = 3
DEFECT_TRACEBACK_CHARS_MAX = 4000
# Tenant names (business keys have their own bound above).
TENANT_LENGTH_MAX = NAME_LENGTH_MAX
# SQLite waits this long for another process's write lock before reporting the store busy.
SQLITE_BUSY_TIMEOUT_MS = 10_000
# How long opening a PostgreSQL store waits for the server before naming the cause (unless
# the URL sets connect_timeout itself).
POSTGRES_CONNECT_TIMEOUT_SECONDS = 5
# A wait with no timeout is due at this instant (seconds since the epoch, far beyond any
# real timer), so "never" is an ordinary comparable value in every query.
WAIT_FOREVER_AT = 1e15
# Event ids, signal names and senders.
EVENT_ID_LENGTH_MAX = 200
# One event's payload (a signal, an approval, a callback), encoded: checked where every event
# is kept (the store's deliver), whatever the codec.
EVENT_PAYLOAD_BYTES_MAX = PAYLOAD_BYTES_MAX
# An instance's inbox: the events it keeps that no wait has taken (pending ones, and refused
# ones: late, ended, not an approver; over every run), in number and in payload bytes. An
# event past either bound is refused (InboxFullError, LF112) and not kept, only counted: a
# signaller cannot grow an instance without bound. Events a wait consumed do not count: each
# is a step of the workflow's own, bounded by STEPS_PER_INSTANCE_MAX.
INBOX_EVENTS_MAX = 1_000
INBOX_BYTES_MAX = 4 * PAYLOAD_BYTES_MAX
# What a page of an instance's inbox (API, console) shows of an event's payload: the payload
# itself up to this many bytes, else only its size (the event's own route gives it whole).
INBOX_PAYLOAD_SHOWN_BYTES_MAX = 4_000
# The operator's queue and the audit log: items one listing shows by default, and at most.
ATTENTION_LIMIT_DEFAULT = 100
ATTENTION_LIMIT_MAX = 10_000
AUDIT_LIMIT_DEFAULT = 100
AUDIT_LIMIT_MAX = 10_000
# Reconciliation: effects one run compares with their participants' facts,
# corrections one run may apply, and runs one listing shows. A run is bounded so that a large
# ledger is covered over several runs (least recently compared first), never in one burst of
# lookups against the participants.
RECONCILE_LIMIT_DEFAULT = 100
RECONCILE_LIMIT_MAX = 10_000
RECONCILE_CORRECTIONS_DEFAULT = 20
RECONCILE_RUNS_LISTED_MAX = 1_000
# Replay checks and moves of in-flight instances (`ledgerflow replay`, `versions upgrade`,
# `versions migrate`): histories one check replays by default, and instances one command
# reads (per status, for a move) at most; a move past it is run again for the rest.
REPLAY_LIMIT_DEFAULT = 100
REPLAY_SCAN_MAX = 10_000
# Exported history files one `ledgerflow replay --histories DIR` reads at most.
REPLAY_HISTORIES_MAX = 10_000
# The HTTP API and console (`ledgerflow serve`). A request body larger than this is refused
# (413) from its Content-Length, or as soon as the bytes read pass it: never read whole first.
# Room for a PAYLOAD_BYTES_MAX payload and the JSON around it.
REQUEST_BODY_BYTES_MAX = 2 * PAYLOAD_BYTES_MAX
# A request that needs no credentials (the console's sign-in form, a health check) has its
# body read up to this only: its credentials are checked before any body is read, and
# nobody unauthenticated gets the server to buffer or parse more than a sign-in form.
ANONYMOUS_BODY_BYTES_MAX = 4_096
# Fields a console form may send (its forms have a dozen): counted before the form is parsed.
FORM_FIELDS_MAX = 100
# The connections `ledgerflow serve` holds (ledgerflow.web.connections): a request's head
# (request line and headers) must arrive within this, counted from the connection or from the
# end of the previous answer; its body within the next, counted from the end of its head
# (2 MB in 30 s is 67 kB/s: a slower client belongs behind a buffering proxy); an idle
# kept-alive connection is closed after the third.
HTTP_HEADER_READ_SECONDS_DEFAULT = 10.0
HTTP_BODY_READ_SECONDS_DEFAULT = 30.0
HTTP_KEEP_ALIVE_SECONDS = 5
# Connections held at once (past it, the one waiting longest for its head is closed, or the new
# one refused 503 when none waits), lowered to what the descriptor limit leaves after the
# reserve below (the journal's files and pool, logs, the process's own).
HTTP_CONNECTIONS_MAX_DEFAULT = 1_000
HTTP_DESCRIPTORS_RESERVED = 64
# Connections accepted per wake-up of the event loop (each is a descriptor before the bound
# above can close anything), and the kernel's queue of those not accepted yet (capped by the
# system's somaxconn).
HTTP_ACCEPTS_PER_WAKE_MAX = 64
HTTP_LISTEN_QUEUE = 4_096
# How long the first answer to a POST with an Idempotency-Key is kept to be replayed.
IDEMPOTENCY_RETENTION_SECONDS = 24 * 3600
# A key whose first request was never answered (only in a journal of Ledgerflow 0.1.0, which
# claimed a key in a transaction of its own, its server dead while carrying it out) is taken
# over by a retry of the same request after this long, and the request carried out again
# (each route is idempotent by its own identity, see operators/idempotency.py).
IDEMPOTENCY_PENDING_SECONDS = 60.0
# /readyz proves the journal readable and writable (a row written and removed) at most once per
# this many seconds per server; calls in between answer that proof's verdict, so nobody can
# make the server write a row per call, or pile threads on a stalled journal.
READY_PROBE_SECONDS = 5.0
# An Idempotency-Key header's length (printable ASCII).
IDEMPOTENCY_KEY_LENGTH_MAX = 200
# Instances one page of a listing holds (API and console), and audit records likewise.
PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 500
# Rows a store reads for one page at most: the largest page and the look-ahead row that proves
# another page follows (ledgerflow.operators.paging); never the page size itself, or a full
# page of the largest size would end with no cursor although more remain.
PAGE_READ_MAX = PAGE_SIZE_MAX + 1
# The console's activity chart: the window it draws, its buckets, and the most buckets a store
# counts in one read (each bucket is at most one row per status).
ACTIVITY_WINDOW_SECONDS = 24 * 3600
ACTIVITY_BUCKET_SECONDS = 3600
ACTIVITY_BUCKETS_MAX = 1000
# A console sign-in lasts this long (the token stays the authority: revoking it ends sessions).
CONSOLE_SESSION_SECONDS = 8 * 3600
# The command line acting with a token (--token, --url): one request to the HTTP API is
# given up after this long (connecting, sending, reading the answer), and `start --wait`
# polls the instance at most this often while it waits.
CLI_API_TIMEOUT_SECONDS = 30.0
CLI_API_POLL_SECONDS_MAX = 1.0
# Integers a request body may hold: those a 64-bit signed integer can (SQLite's and
# PostgreSQL's bigint); anything larger is refused (422), never passed to the journal.
REQUEST_INTEGER_MAX = 2**63 - 1
# How often the journal's gauges (parked, flagged, UNKNOWN open) are read for metrics, at most:
# every exporting process reads them, so this bounds the load they put on the journal.
METRICS_SIGNALS_SECONDS_DEFAULT = 15.0
# Adoption (runtime/adoption.py): a worker whose last look found nothing to adopt looks again
# after this long at most (a look is one read of the journal), and it keeps the replay
# verdicts (and the instances it found divergent) of this many journals, the oldest forgotten.
ADOPTION_SCAN_SECONDS = 1.0
ADOPTION_VERDICTS_KEPT_MAX = 10_000
# An instance a worker may not adopt now (an UNKNOWN effect its replay does not reach) is
# looked at again after this long (an operator may have settled the effect meanwhile).
ADOPTION_REFUSED_RECHECK_SECONDS = 30.0
# A failure's traceback kept in the journal: its last lines, at most this many characters.
TRACEBACK_CHARS_MAX = 4_000
# The fault explorer (``ledgerflow verify``). Each arrival scripted for one event is one option
# at every wait on it, so it multiplies the paths explored: at most this many per event.
ARRIVALS_PER_EVENT_MAX = 20
# Paths through a workflow's waits and callbacks (one per choice of what arrives) that
# exhaustive mode sweeps; past it the rest is counted as unexplored, never silently dropped.
EXPLORER_PATHS_MAX = 64
# Choices of what arrives one instance gets in one simulated run: a workflow that waits in a
# loop is given this many events, then left WAITING (and reported so).
EXPLORER_DECISIONS_PER_INSTANCE_MAX = 100
# Instances started inside callers' transactions (engine.within) that an engine remembers until
# their commit is proven, to answer NotCommittedError for them; past it the oldest is forgotten
# (a read of it then says InstanceNotFoundError, as any other process's would).
WITHIN_UNCOMMITTED_MAX = 1_000

# How far ahead a delayed start (start_at= / start_in=) may be scheduled: ten years.
START_DELAY_SECONDS_MAX = 10 * 366 * 24 * 3600.0
# Debounced starts (``debounce_seconds=``): the longest wait from a window's first start when
# the start names none (this many windows), and the starts one window collapses before its
# pending start is due at once (each keeps the input it replaced on the timeline).
DEBOUNCE_MAX_WINDOWS_DEFAULT = 10
DEBOUNCE_STARTS_MAX = 1_000
# Parallel branches (runtime/branches.py): a call in a run with branches returns once no
# branch took a new position for this many turns of the event loop in a row (long enough for
# a finished task to reach the ``gather`` or ``TaskGroup`` that awaits it, a few levels deep),
# and waits for that at most this many turns.
BRANCH_QUIET_TURNS = 16
BRANCH_SETTLE_TURNS_MAX = 10_000
# Durable locks (``ctx.lock``). A released lock is offered to at most this many waiters in its
# release's transaction (a waiter whose inbox refuses the grant, ended or closed, is skipped);
# past it the lock stays free and the next acquiring takes it.
LOCK_HAND_ON_TRIES_MAX = 100
# Hops of the wait-for graph (a holder waiting for a lock another holds...) an acquiring
# follows to find the cycle its queueing would close; a longer chain is taken as no cycle.
LOCK_WAIT_CHAIN_MAX = 100
# Held locks (and as many queued waiters) one listing shows (``ledgerflow locks``, the API).
LOCKS_SHOWN_MAX = 1_000

# Published values (ctx.publish): how many a listing shows per instance, the longest name, and
# how often a wait for a new version (engine.wait_published) reads the store again.
VALUES_SHOWN_MAX = 1_000
VALUE_NAME_LENGTH_MAX = 200
VALUE_POLL_SECONDS = 0.05
# The longest an HTTP update waits for its reply before answering 202 without it.
UPDATE_WAIT_SECONDS_MAX = 60.0
# How many update requests one ctx.handle_updates call handles at most.
UPDATES_HANDLED_MAX = 100
# Flow control on effects: how often a worker reads the effect limits again (a limit set takes
# effect on running workers within this), how soon an effect held by a concurrency limit asks
# again, the in_flight_max an effect limit without a concurrency bound is stored with, and how
# many admissions a listing shows.
FLOW_LIMITS_REFRESH_SECONDS = 1.0
FLOW_CONCURRENCY_POLL_SECONDS = 0.05
# A THROTTLED effect whose wait is long gives its instance back this much before its slot.
FLOW_WAKE_LEAD_SECONDS = 0.3
FLOW_IN_FLIGHT_UNBOUNDED = 2_000_000_000
FLOW_ADMISSIONS_LISTED_MAX = 100_000

# The participant kit (ledgerflow.participant.Kit): idle connections it keeps for reuse, and
# the clock skew between the engine and the kit it allows by default (a key's first-sent time,
# on the engine's clock, is taken this much earlier before it is compared with the moment since
# which the kit's record is complete).
KIT_IDLE_CONNECTIONS_MAX = 8
KIT_CLOCK_SKEW_SECONDS = 5.0
# Messages a broker relay holds unacknowledged at once (RabbitMQ's prefetch): each is acked
# only after the journal commit it causes, so this bounds the work a killed relay leaves to
# redelivery.
RELAY_PREFETCH = 64
# Deliveries of one request a broker makes before it dead-letters it (RabbitMQ's quorum
# queue x-delivery-limit, RabbitMQ 4's own default).
BROKER_DELIVERY_LIMIT_DEFAULT = 20
# Seconds a broker relay waits before connecting again after its connection was lost: the
# first pause, doubled after each failure up to the last.
RELAY_RECONNECT_SECONDS_MIN = 0.1
RELAY_RECONNECT_SECONDS_MAX = 5.0
# Seconds a NATS relay's consumer waits for the ack of a reply before the server delivers it
# again (JetStream's AckWait): what a killed relay held comes back this soon.
RELAY_ACK_WAIT_SECONDS = 5.0
