/*
 * kvfence transfer protocol: gateway, prefill worker, decode worker and a faulty network, as one Promela model.
 * Names of states and frames are those of src/transfer/ (see spec/README.md for the action -> function map).
 *
 *   gateway --RESERVE--> decode --RESERVED(ticket)--> gateway --PREFILL--> prefill --HELLO, PAGE.., COMMIT | ABORT--> decode
 *   decode --END_FINISHED | END_FAILED--> gateway;  gateway --CANCEL--> decode, prefill;  one outcome per request
 *
 * Faults, each one a nondeterministic choice (FAULTS_MAX bounds how many in one run): the wire loses, duplicates or
 * reorders (holds back) a frame; prefill crashes mid-transfer; decode crashes (losing its reservation; its pages keep
 * whatever the GPU held); a reservation expires; the gateway's deadline fires; the client cancels.
 *
 * Properties:
 *   P1_decode_reads_own_pages    (assertion) decode only decodes from pages written by this reservation's transfer
 *   P2_no_success_after_failure  (assertion) no 200 for a request whose transfer failed, aborted or was cut short
 *   P3_ends_at_most_once         (assertion) a request never gets a second outcome
 *   P3_every_request_ends        (LTL, weak fairness) every request eventually gets its outcome
 * Invalid end states (a process stuck outside an end label) are a P3 violation too: something hangs.
 *
 * Built from this one source with the C preprocessor (spin -D...):
 *   -DMUTANT_PLACEHOLDER  the 2026 incident: prefill replaces a request it cannot serve by a 1-page placeholder and
 *                         COMMITs it as complete, and decode accepts a COMMIT whose page count does not match the
 *                         reservation. Violates P1 (and P2).
 *   -DMUTANT_NO_DEADLINE  the gateway waits without a deadline. Violates P3 (a decode crash leaves a request hanging).
 *   -DCONCURRENT          requests run at once instead of one after another (decode then answers END_FAILED: no room).
 *   -DNREQ=n -DPAGES=n -DFAULTS_MAX=n  the bounds (defaults 2, 2, 1).
 */

#ifndef NREQ
#define NREQ 2            /* requests (one gateway handler each) */
#endif
#ifndef PAGES
#define PAGES 2           /* pages per reservation (= the decode pool) */
#endif
#ifndef FAULTS_MAX
#define FAULTS_MAX 1      /* wire, crash and expiry faults in one run */
#endif

#define STALE 255         /* page content left by an earlier tenant (or an unscrubbed GPU after a crash) */
#define SCRUBBED 0        /* freed page: zeroed (I4) */

mtype = { HELLO, PAGE, COMMIT, ABORT };                    /* transfer frames (src/transfer wire format) */
mtype = { RESERVE, RESERVED, PREFILL, CANCEL, END_FINISHED, END_FAILED };   /* control: src/cluster/control-protocol.ts */

/* receiver (decode) states, as src/transfer/transfer-state.ts RECEIVER_STATES. The terminal ones (COMMITTED after
 * decoding, FAILED, CANCELLED, EXPIRED) release the reservation at once, so the model keeps only NO_RESERVATION. */
#define NO_RESERVATION 0  /* no live ticket: every frame is dropped, never applied */
#define AWAIT_HELLO 1     /* ticket issued (TransferReceiver.expect), waiting for HELLO */
#define RECEIVING 2       /* HELLO accepted, PAGE frames written in index order */
#define COMMITTED 3       /* COMMIT verified: ready to decode */

/* outcomes reported to the client (I6); the state keeps only whether and how it ended, the trail prints which */
#define O_COMPLETED 1     /* 200 */
#define O_REJECTED 2      /* 4xx: context_length_exceeded (I2) */
#define O_FAILED 3        /* 5xx */
#define O_UNAVAILABLE 4   /* 503 no room */
#define O_CANCELLED 5     /* the client went away */
#define ENDED_NOT 0
#define ENDED_COMPLETED 1
#define ENDED_OTHERWISE 2

chan gw2dec = [4] of { mtype, byte };                    /* RESERVE r | CANCEL r */
chan dec2gw[NREQ + 1] = [2] of { mtype, byte };         /* per request: RESERVED nonce | END_FINISHED | END_FAILED */
chan gw2pre = [4] of { mtype, byte, byte };              /* PREFILL r nonce | CANCEL r */
chan wire = [2] of { mtype, byte, byte, byte };          /* frame, request, nonce, argument (page index or count) */

byte outcome[NREQ + 1];
byte ended;                                              /* requests with an outcome */
byte faults;
bool failure_seen[NREQ + 1];                             /* ghost: this request's transfer failed or was cut short */
byte page_owner[PAGES];                                  /* nonce of the reservation holding the page (0: free) */
byte page_writer[PAGES] = STALE;                         /* nonce of the transfer that wrote it */

hidden byte P1_decode_reads_own_pages;
hidden byte P2_no_success_after_failure;
hidden byte P3_ends_at_most_once;
hidden byte I3_write_to_own_page;

#define fault_allowed (faults < FAULTS_MAX)

inline report(r, o) {
  d_step {
    printf("MSC: request %d outcome %d\n", r, o);
    P3_ends_at_most_once = (outcome[r] == ENDED_NOT);
    assert(P3_ends_at_most_once);
    P2_no_success_after_failure = (o != O_COMPLETED || !failure_seen[r]);
    assert(P2_no_success_after_failure);
    outcome[r] = (o == O_COMPLETED -> ENDED_COMPLETED : ENDED_OTHERWISE);
    ended++
  }
}

/* ---------------------------------------------------------------- gateway: one handler per request, concurrent */
#ifdef MUTANT_NO_DEADLINE
#define deadline false
#else
#define deadline true                                         /* a deadline may expire at any moment */
#endif

proctype Request(byte r) {
  byte n, nonce;
  bool client_cancels;
  mtype m;
  if
  :: report(r, O_REJECTED); goto done                         /* I2: prompt + max_tokens > proven context */
  :: client_cancels = false
  :: client_cancels = true                                    /* this client will go away at some moment */
  fi;
  gw2dec!RESERVE, r;
  dec2gw[r]?m, n;                                             /* decode answers a reservation at once */
  if
  :: m == RESERVED -> nonce = n
  :: m == END_FAILED -> report(r, O_UNAVAILABLE); goto done  /* server_overloaded (503): never overcommit */
  :: else -> assert(false)
  fi;
  gw2pre!PREFILL, r, nonce;
  do                                                          /* wait for decode's result */
  :: dec2gw[r]?m, n ->
     if
     :: m == END_FINISHED -> report(r, O_COMPLETED)
     :: m == END_FAILED -> gw2pre!CANCEL, r, nonce; report(r, O_FAILED)
     :: else -> assert(false)
     fi;
     break
  :: client_cancels -> gw2dec!CANCEL, r; gw2pre!CANCEL, r, nonce; report(r, O_CANCELLED); break
  :: deadline -> gw2dec!CANCEL, r; gw2pre!CANCEL, r, nonce; report(r, O_FAILED); break
  od;
done:
  skip
}

/* ---------------------------------------------------------------- prefill worker (TransferSender) + network */
/* The network's faults are applied where a frame is sent: it arrives, is lost, arrives twice, or is held back and
 * arrives after later frames (even after the transfer ended, or during the next request's transfer). */
inline net_send(f, a) {
  if
  :: wire!f, r, nonce, a                                                     /* delivered */
  :: fault_allowed -> faults++                                              /* lost */
  :: fault_allowed -> faults++; wire!f, r, nonce, a; wire!f, r, nonce, a    /* duplicated */
  :: fault_allowed && !held -> d_step { faults++; held = true; hm = f; hr = r; hn = nonce; ha = a }   /* held back */
  fi
}

inline release_held() {
  wire!hm, hr, hn, ha; d_step { held = false; hm = 0; hr = 0; hn = 0; ha = 0 }
}

inline send_frame(f, a) {
  if
  :: gw2pre??[CANCEL, eval(r), eval(nonce)] ->                 /* cancelled: stop and say so */
     gw2pre??CANCEL, eval(r), eval(nonce); net_send(ABORT, 0); goto idle
  :: !gw2pre??[CANCEL, eval(r), eval(nonce)] -> net_send(f, a)
  :: held -> release_held()                                   /* the held-back frame overtaken: arrives now */
  fi
}

proctype Prefill() {
  byte r, nonce, i;
  mtype m, hm;
  byte hr, hn, ha;
  bool held;
idle:
  atomic { r = 0; nonce = 0; i = 0; m = 0 };
end_idle:
  do
  :: held -> release_held()
  :: gw2pre?m, r, nonce ->
     if
     :: m == CANCEL -> goto idle                              /* nothing of it is running here */
     :: m == PREFILL ->
        if
        :: true ->                                            /* cannot serve it (over this worker's limit) */
           failure_seen[r] = true;
#ifdef MUTANT_PLACEHOLDER
           send_frame(HELLO, 0);                              /* the incident: a 1-page placeholder ... */
           send_frame(PAGE, 0);
           send_frame(COMMIT, 1);                             /* ... committed as if complete */
#else
           net_send(ABORT, 0);
#endif
           goto idle
        :: true ->
           send_frame(HELLO, 0);
           i = 0;
           do
           :: i < PAGES ->
              if
              :: fault_allowed -> d_step { faults++; failure_seen[r] = true }; goto idle   /* crash */
              :: true -> send_frame(PAGE, i); i++
              fi
           :: i == PAGES -> break
           od;
           send_frame(COMMIT, PAGES);
           goto idle
        fi
     fi
  od
}

/* ---------------------------------------------------------------- decode worker (TransferReceiver + decode) */
proctype Decode() {
  mtype m;
  byte r, n, a, i;
  byte state = NO_RESERVATION, req, nonce, next_nonce = 1, received;

end_loop:
  do
  :: gw2dec?m, r ->
     if
     :: m == RESERVE && state == NO_RESERVATION ->          /* reserve pages: owner stamped, nothing written */
        d_step {
          state = AWAIT_HELLO; req = r; nonce = next_nonce; next_nonce++; received = 0;
          i = 0; do :: i < PAGES -> page_owner[i] = nonce; i++ :: i == PAGES -> break od; i = 0
        };
        dec2gw[r]!RESERVED, nonce
     :: m == RESERVE && state != NO_RESERVATION -> dec2gw[r]!END_FAILED, 0   /* never overcommit */
     :: m == CANCEL && state != NO_RESERVATION && req == r -> printf("MSC: CANCELLED\n"); goto release
     :: m == CANCEL && (state == NO_RESERVATION || req != r) -> skip
     fi;
     goto next

  :: wire?m, r, n, a ->
     if
     :: state == NO_RESERVATION || n != nonce || r != req -> skip   /* no live ticket: dropped, never applied */
     :: state != NO_RESERVATION && n == nonce && r == req ->
        if
        :: m == HELLO && state == AWAIT_HELLO -> state = RECEIVING                  /* HELLO_OK */
        :: m == PAGE && state == RECEIVING && a == received && a < PAGES ->         /* PAGE_OK: the next index */
           d_step {                                          /* checked and written with nothing in between */
             I3_write_to_own_page = (page_owner[a] == nonce);
             assert(I3_write_to_own_page);
             page_writer[a] = nonce; received++
           }
        :: m == COMMIT && state == RECEIVING ->
#ifdef MUTANT_PLACEHOLDER
           if
           :: a == received -> goto commit                   /* the incident: the count checked against itself */
           :: else -> goto fail
           fi
#else
           if
           :: a == PAGES && received == PAGES -> goto commit /* COMMIT_OK: the reservation's page count, all here */
           :: else -> goto fail                              /* commit_mismatch, page_missing */
           fi
#endif
        :: m == ABORT -> goto fail                           /* ABORT: sender_aborted */
        :: else -> goto fail                                 /* REJECT: duplicate, out of order, before HELLO */
        fi
     fi;
     goto next

  :: state == AWAIT_HELLO || state == RECEIVING ->           /* DEADLINE or IDLE: EXPIRED */
     printf("MSC: EXPIRED\n"); goto fail

  :: state != NO_RESERVATION && fault_allowed ->             /* crash: reservation forgotten, GPU pages not zeroed */
     d_step {
       faults++; failure_seen[req] = true;
       i = 0; do :: i < PAGES -> page_owner[i] = 0; page_writer[i] = STALE; i++ :: i == PAGES -> break od;
       state = NO_RESERVATION; req = 0; nonce = 0; received = 0; i = 0
     };
     goto next
  od;

commit:
  state = COMMITTED;
  d_step {                                                   /* decode attends over every reserved page */
    i = 0;
    do
    :: i < PAGES ->
       P1_decode_reads_own_pages = (page_owner[i] == nonce && page_writer[i] == nonce);
       assert(P1_decode_reads_own_pages);
       i++
    :: i == PAGES -> break
    od;
    i = 0
  };
  dec2gw[req]!END_FINISHED, 0;
  goto release;

fail:                                                        /* FAILED or EXPIRED: the gateway hears end(failed) */
  failure_seen[req] = true;
  dec2gw[req]!END_FAILED, 0;

release:                                                     /* scrubAndRelease: every page zeroed (I4) */
  atomic {
    i = 0; do :: i < PAGES -> page_owner[i] = 0; page_writer[i] = SCRUBBED; i++ :: i == PAGES -> break od;
    state = NO_RESERVATION; req = 0; nonce = 0; received = 0; i = 0
  };

next:
  atomic { m = 0; r = 0; n = 0; a = 0 };
  goto end_loop
}

init {
  byte r = 1;
  atomic { run Prefill(); run Decode() };
  do
  :: r <= NREQ ->
#ifndef CONCURRENT
     ended == r - 1;                                          /* one request at a time (its frames may still fly) */
#endif
     run Request(r); r++
  :: r > NREQ -> break
  od
}

ltl P3_every_request_ends { <> (ended == NREQ) }
