/*
 * k8s Event bridge -> JetStream delivery protocol, abstract model.
 *
 * Knobs (pass to spin with -D..., e.g. spin -DNR=2 -DCKPT=1 -a bridge.pml):
 *   NV        number of Event versions written (write slot i has RV i+1)      default 3
 *   SAMEOBJ   all versions belong to one object (default: objects A,A,B)
 *   FILT1     the second version written (RV 2 unless the deletion came first) is filtered out
 *   NR        replicas running the full algorithm concurrently (1 or 2)       default 1
 *             (2: leader election on a Lease; a deposed leader may still run until renew_deadline,
 *             then stops at once without another checkpoint write: replica 0, which may stop for
 *             good at any moment; both running everything all the time over-approximates this)
 *   MAXCRASH  crashes (any replica, any point) in one run                      default 1
 *   MAXCOMP   compactions in one run                                            default 1
 *   CKPT      checkpoint write: 0 CAS-max (the code: KvCheckpointStore.save: revision+value read or
 *             cached, leave it if stored >= ours, else update(last=revision), re-read on a
 *             wrong-last-sequence error), 1 plain put (the code before), 2 last writer wins
 *             (read, max, put without CAS)                                       default 0
 *   GAPHELD   1: the gap message is a ledger entry (holds the checkpoint; the code:
 *                Intake.gap queues it with progress.pending(None))
 *             0: queued without a ledger entry (the code before issue 9)         default 1
 *   NODEDUP   the stream stores a publish even if it holds the id already
 *   LITERAL   also assert the literal "not compacted away => in stream" form
 *   FINALC    at quiescence assert the checkpoint reached the newest RV
 *   DEL       Kubernetes may delete one object (any object that has a written version) once,
 *             at any moment before calm. The deletion is a write of that object with its own RV
 *             (so NV versions + 1 deletion = NW write slots), filtered like FILT1 (the bridge drops
 *             DELETED by default): the watch steps over it, never published. A deleted object is
 *             not listed by a relist, and its versions are superseded (compactable: compUnstored).
 *             A later version of the same object re-creates it.
 *   GAPRULE   the "nothing missed" rule of a 410 relist (bridge.core.gaps.after_relist):
 *             1: gap unless (no listed item newer than the 410's RV AND watched-at-410) -- the code
 *             0: gap unless no listed item newer (the code before; unsound with DEL)      default 1
 *             watched[r] = the code's ResumePoint.covered: 0 at (re)start (from the checkpoint) and after a
 *             failed watch/list (WFAIL), 1 after a relist and on every watch step (and on a watch
 *             that opens/ends normally at wrv >= K); gapWatched[r] = ResumePoint.expired.covered, taken at the 410.
 *   WFAIL     a watch (or the relist's list) may fail without a crash: watched := 0 (the code:
 *             Watcher._failed calls ResumePoint.broken())                   default 1
 *   WATCHSEES the code's timing ASSUMPTION (docs/delivery.md: "a continuously open watch sees every
 *             change in scope before etcd compacts it, except in the instant between one watch's
 *             end and the next request"). In the model a watch can lag arbitrarily, so the
 *             assumption is put on the environment, for replicas with watched=1:
 *             bit 1 (a) "an open watch delivers before compaction": etcd compacts past the RV of an
 *                 open watch (ph 1, wrv >= K) only when that watch has seen every change in scope
 *                 written so far (versions to deliver and the deletion; FILT1's version counts as
 *                 out of scope: it is how the model's one scope gets the quiet-scope 410);
 *             bit 2 (b) "the instant between a watch's end and the list": a version written after
 *                 the position of a replica whose watch is ending (its RV compacted, the 410 due)
 *                 or that is between that 410 and its relist is not deleted before that relist.
 *             default 3 (both) with DEL, 0 without (without deletions the rule needs neither, so
 *             compaction stays unrestricted there). -DWATCHSEES=1 / =2 show each is needed.
 *   LN        ledger capacity per replica (default 8, 10 with DEL)
 *   REACHNM   sanity: assert the relist's "nothing missed" branch (after a real gap range) is
 *             never taken; a trail shows it is reachable
 */
#ifndef NV
#define NV 3
#endif
#ifndef NR
#define NR 1
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXCOMP
#define MAXCOMP 1
#endif
#ifndef CKPT
#define CKPT 0
#endif
#ifndef GAPHELD
#define GAPHELD 1
#endif
#ifndef GAPRULE
#define GAPRULE 1
#endif
#ifndef WFAIL
#define WFAIL 1
#endif
#ifdef DEL
#define NW (NV+1)         /* write slots: NV versions + one deletion */
#ifndef WATCHSEES
#define WATCHSEES 3
#endif
#else
#define NW NV
#ifndef WATCHSEES
#define WATCHSEES 0
#endif
#endif

#define NOBJ 2
#ifndef NG
#define NG 4              /* distinct gap ids (from,to) in one run */
#endif
#define NID (NW+NG)       /* message ids: 0..NW-1 write slots, NW.. gaps */
#ifndef LN
#ifdef DEL
#define LN 10             /* ledger capacity per replica */
#else
#define LN 8
#endif
#endif
#define NONE 255
#define DONEK 254         /* ledger kind: a done marker (filtered item, list end) */
#define RV(i) ((i)+1)

/* write slot i (RV i+1): set when written. Versions come in a fixed order (content index c):
   A@c0, A@c1, B@c2, A@c3 (SAMEOBJ: all A; FILT1: c1 filtered); a deletion takes the next slot. */
byte objOf[NW];
bit  must[NW];
bit  isDel[NW];
#ifdef SAMEOBJ
#define COBJ(c) 0
#else
#define COBJ(c) ((c) == 2 -> 1 : 0)
#endif
#ifdef FILT1
#define CMUST(c) ((c) != 1)
#else
#define CMUST(c) 1
#endif

/* ---- Kubernetes side ---- */
byte nw = 0;              /* writes so far (versions + deletion) == current RV */
bit  ndel = 0;            /* the deletion happened (DEL) */
byte K = 0;               /* compaction point: superseded versions with RV <= K are gone */
byte ncomp = 0;
byte ncrash = 0;
bit  calm = 0;            /* no more crashes, compactions, stops */
bit  compUnstored[NW];    /* ghost: compacted away while not in the stream */

/* ---- JetStream stream ---- */
byte stored[NID];         /* copies of each id in the stream */
bit  cov[NW];             /* ghost: a stored gap message covers this version */
byte gF[NG]; byte gT[NG]; byte gN = 0;   /* gap id table: (from, to] */

/* ---- KV checkpoint ---- */
byte kvC = 0;
byte kvRev = 0;
bit  back = 0;            /* ghost: a write moved the checkpoint backwards */
bit  dup = 0;             /* ghost: the stream holds some id twice */

/* ---- network: publish of id by replica r in flight (or being retried) ---- */
bit net[NR*NID];
byte innet = 0;           /* number of set bits in net[] */
inline setnet(x) { if :: !net[x] -> net[x] = 1; innet++ :: else -> skip fi }
inline clrnet(x) { if :: net[x] -> net[x] = 0; innet-- :: else -> skip fi }
bit statq[NR*NID];        /* status message queued without ledger entry (GAPHELD 0) */

/* ---- replicas ---- */
byte ph[NR];              /* 0 down (will start), 1 watching, 2 must relist, 3 stopped */
byte wrv[NR];             /* watcher's resourceVersion: last passed on */
byte gapFrom[NR];         /* set by a 410 */
bit  watched[NR];         /* the code's ResumePoint.covered (GAPRULE) */
bit  gapWatched[NR];      /* Expiry.covered (bridge.core.resume): watched[] at the 410 */
byte safe[NR];            /* progress.safe_rv */
byte saved[NR];           /* what this replica last saved */
byte wst[NR];             /* checkpoint write in progress (CAS-max, LWW) */
byte cv[NR]; byte crev[NR]; byte cs[NR];
typedef Ledger { byte k[LN]; byte rv[LN]; bit dn[LN]; byte h; byte t };
Ledger led[NR];

#define RUNNING(r) (ph[r] == 1 || ph[r] == 2)

/* properties */
#define SV(i) (!must[i] || RV(i) > kvC || stored[i] > 0 || cov[i])
#if NW == 3
#define SOUND (SV(0) && SV(1) && SV(2))
#elif NW == 4
#define SOUND (SV(0) && SV(1) && SV(2) && SV(3))
#elif NW == 5
#define SOUND (SV(0) && SV(1) && SV(2) && SV(3) && SV(4))
#endif
ltl sound { [] SOUND }        /* P3 checkpoint soundness, every state */
ltl nodup { [] !dup }         /* P2 no duplicate id, every state */
ltl mono  { [] !back }        /* checkpoint never moves backwards */
ltl safe  { [] (SOUND && !dup) }          /* P2 + P3 in one run */
ltl all   { [] (SOUND && !dup && !back) } /* P2 + P3 + monotone in one run */

/* ledger: an item handed to the publisher */
inline pend(r, id, rvv) {
  assert(led[r].t < LN);
  led[r].k[led[r].t] = id; led[r].rv[led[r].t] = rvv; led[r].dn[led[r].t] = 0;
  led[r].t++;
  setnet(r*NID + id)           /* published (pipelined, no wait for the ack) */
}

/* ledger: an item that needs no publish (progress.done) */
inline mark(r, rvv) {
  if
  :: led[r].h == led[r].t ->
     if :: rvv != NONE -> safe[r] = rvv :: else -> skip fi
  :: else ->
     if
     :: led[r].dn[led[r].t - 1] ->
        if :: rvv != NONE -> led[r].rv[led[r].t - 1] = rvv :: else -> skip fi
     :: else ->
        assert(led[r].t < LN);
        led[r].k[led[r].t] = DONEK; led[r].rv[led[r].t] = rvv; led[r].dn[led[r].t] = 1;
        led[r].t++
     fi
  fi
}

/* ledger: JetStream acked id; advance safe over the done prefix */
inline ackit(r, id) {
  j = led[r].h;
  do
  :: j < led[r].t && led[r].k[j] == id && !led[r].dn[j] -> led[r].dn[j] = 1; break
  :: j < led[r].t && !(led[r].k[j] == id && !led[r].dn[j]) -> j++
  :: j >= led[r].t -> break
  od;
  do
  :: led[r].h < led[r].t && led[r].dn[led[r].h] ->
     if :: led[r].rv[led[r].h] != NONE -> safe[r] = led[r].rv[led[r].h] :: else -> skip fi;
     led[r].k[led[r].h] = 0; led[r].rv[led[r].h] = 0; led[r].dn[led[r].h] = 0;
     led[r].h++
  :: else -> break
  od;
  if :: led[r].h == led[r].t -> led[r].h = 0; led[r].t = 0 :: else -> skip fi;
  j = 0
}

/* is id still waiting for an ack at replica r (so the publisher retries it)? */
inline waiting(r, id) {
  pw = statq[r*NID + id];
  j = led[r].h;
  do
  :: j < led[r].t -> if :: led[r].k[j] == id && !led[r].dn[j] -> pw = 1 :: else -> skip fi; j++
  :: else -> break
  od;
  j = 0
}

inline reset(r) {
  j = 0;
  do
  :: j < LN -> led[r].k[j] = 0; led[r].rv[j] = 0; led[r].dn[j] = 0; j++
  :: else -> break
  od;
  j = 0;
  do
  :: j < NID -> statq[r*NID + j] = 0; j++
  :: else -> break
  od;
  j = 0;
  led[r].h = 0; led[r].t = 0;
  wrv[r] = 0; gapFrom[r] = 0; safe[r] = 0; saved[r] = 0; watched[r] = 0; gapWatched[r] = 0;
  wst[r] = 0; cv[r] = 0; crev[r] = 0; cs[r] = 0
}

inline kvwrite(val) {
  printf("MSC: R%d writes checkpoint %d (KV held %d)\n", r, val, kvC);
  if :: val < kvC -> back = 1 :: else -> skip fi;
  kvC = val;
#if CKPT == 0
  kvRev++
#endif
}

/* one message lands at the stream (or is lost) */
inline store(id) {
  if
  :: stored[id] == 0 ->
     stored[id] = 1;
     if
     :: id >= NW ->            /* a gap message: it covers (from, to] */
        j = 0;
        do
        :: j < NW -> if :: gF[id-NW] < RV(j) && RV(j) <= gT[id-NW] -> cov[j] = 1 :: else -> skip fi; j++
        :: else -> break
        od;
        j = 0
     :: else -> skip
     fi
  :: else ->
#ifdef NODEDUP
     stored[id] = 2; dup = 1
#else
     skip                      /* duplicate id: dropped by the dedup window, acked */
#endif
  fi;
  assert(stored[id] <= 1)      /* P2 */
}

active proctype Stream() {
  byte x, r, id, j; bit pw;
end:
  do
  :: atomic { innet > 0 ->
       /* pick any message in flight */
       x = 0;
       do
       :: x < NR*NID && net[x] -> break
       :: x < NR*NID -> x++
       :: x == NR*NID -> break                                    /* picked none: no-op */
       od;
       if
       :: x < NR*NID ->
          r = x / NID; id = x % NID;
          waiting(r, id);
          if
          :: true -> store(id); ackit(r, id); statq[x] = 0; clrnet(x);   /* stored, acked */
             printf("MSC: stream stores id %d from R%d, ack arrives (R%d safe now %d)\n", id, r, r, safe[r])
          :: true -> store(id); if :: !pw -> clrnet(x) :: else -> skip fi; /* stored, ack lost: retried while waiting */
             printf("MSC: stream stores id %d from R%d, ack lost\n", id, r)
          :: !pw -> clrnet(x);                                    /* lost; sender gone, no retry */
             printf("MSC: publish of id %d from R%d lost (sender crashed, no retry)\n", id, r)
          fi
       :: else -> skip
       fi;
       x = 0; r = 0; id = 0; pw = 0
     }
  od
}

inline gapid(from, to) {
  g = 0;
  do
  :: g < gN && !(gF[g] == from && gT[g] == to) -> g++
  :: g < gN && gF[g] == from && gT[g] == to -> break
  :: g == gN -> assert(gN < NG); gF[g] = from; gT[g] = to; gN++; break
  od
}

/* after a 410: list (newest version of each object, list RV L0), gap, continue from L0 */
inline relist(r) {
  L0 = nw; passed = 0; o = 0;
  do
  :: o < NOBJ ->
     n = NONE; i = 0;
     do
     :: i < nw -> if :: objOf[i] == o -> n = i :: else -> skip fi; i++
     :: else -> break
     od;
     if
     :: n != NONE && isDel[n] -> skip        /* deleted: not in the list */
     :: n != NONE && !isDel[n] && RV(n) > wrv[r] ->  /* older ones: passed on before, skipped */
        passed++;
        printf("MSC: R%d relist item RV %d (obj %d): publishes it\n", r, RV(n), o);
        if :: must[n] -> pend(r, n, NONE) :: else -> mark(r, NONE) fi
     :: else -> skip
     fi;
     o++
  :: else -> break
  od;
  if
#if GAPRULE
  :: gapFrom[r] != NONE && L0 > gapFrom[r] && (passed > 0 || !gapWatched[r]) ->
#else
  :: gapFrom[r] != NONE && L0 > gapFrom[r] && passed > 0 ->
#endif
     gapid(gapFrom[r], L0);
     printf("MSC: R%d relist at L=%d: %d items newer than %d, watched up to the 410=%d: publishes gap (%d,%d] as id %d, ledger entry=%d\n", r, L0, passed, gapFrom[r], gapWatched[r], gapFrom[r], L0, NW + g, GAPHELD);
#if GAPHELD
     pend(r, NW + g, NONE)
#else
     statq[r*NID + NW + g] = 1; setnet(r*NID + NW + g)
#endif
  :: else ->
     printf("MSC: R%d relist at L=%d: %d items newer than %d, watched up to the 410=%d: nothing missed, no gap\n", r, L0, passed, gapFrom[r], gapWatched[r]);
#ifdef REACHNM
     assert(!(gapFrom[r] != NONE && L0 > gapFrom[r]))  /* sanity: a trail = the branch is reachable */
#endif
     skip
  fi;
  printf("MSC: R%d relist done, continues watching from L=%d\n", r, L0);
  gapFrom[r] = NONE; wrv[r] = L0; mark(r, L0); ph[r] = 1; watched[r] = 1; gapWatched[r] = 0;
  L0 = 0; passed = 0; o = 0; n = 0; i = 0; g = 0
}

proctype Replica(byte r) {
  byte i, j, o, n, g, L0, passed;
end:
  do
  /* (re)start: read the checkpoint, watch from it */
  :: atomic { ph[r] == 0 ->
       wrv[r] = kvC; safe[r] = kvC; saved[r] = kvC; gapFrom[r] = NONE; ph[r] = 1; watched[r] = 0;
       printf("MSC: R%d starts: reads checkpoint C=%d, watches from RV %d\n", r, kvC, kvC) }
  /* the watch: 410 when the history after wrv is compacted */
  :: atomic { ph[r] == 1 && wrv[r] < K ->
       if :: gapFrom[r] == NONE -> gapFrom[r] = wrv[r]; gapWatched[r] = watched[r] :: else -> skip fi;
       ph[r] = 2; printf("MSC: R%d watch from RV %d: 410 expired (history compacted to %d), watched without a break=%d\n", r, wrv[r], K, watched[r]) }
  /* the watch: next version */
  :: atomic { ph[r] == 1 && wrv[r] >= K && wrv[r] < nw ->
       i = wrv[r];
       printf("MSC: R%d watch delivers RV %d (obj %d, deletion=%d), publishes it=%d (0: filtered out)\n", r, RV(i), objOf[i], isDel[i], must[i]);
       if :: must[i] -> pend(r, i, RV(i)) :: else -> mark(r, RV(i)) fi;
       wrv[r] = RV(i); watched[r] = 1; i = 0 }
  /* the watch opens (or ends normally: closed, quiet) with its history there: from now on it sees
     every change (the code: ResumePoint.covered after CLOSED/QUIET; the model says so already when it is open) */
  :: atomic { ph[r] == 1 && wrv[r] >= K && !watched[r] -> watched[r] = 1;
       printf("MSC: R%d watch from RV %d is open: watched without a break from here\n", r, wrv[r]) }
#if WFAIL
  /* a watch or list fails (reset, 5xx, timeout) without a crash: retried from the same RV */
  :: atomic { RUNNING(r) && !calm && (watched[r] || gapWatched[r]) -> watched[r] = 0; gapWatched[r] = 0;
       printf("MSC: R%d watch/list fails and is retried: not watched without a break any more\n", r) }
#endif
  :: atomic { ph[r] == 2 -> relist(r) }
  /* checkpoint write */
#if CKPT == 0
  :: atomic { RUNNING(r) && wst[r] == 0 && safe[r] > saved[r] ->
       cv[r] = kvC; crev[r] = kvRev; cs[r] = safe[r]; wst[r] = 1 }          /* read value+revision */
  :: atomic { RUNNING(r) && wst[r] == 1 ->
       if
       :: kvRev == crev[r] ->
          if :: cs[r] > cv[r] -> kvwrite(cs[r]) :: else -> skip fi;     /* max(current, mine) */
          saved[r] = cs[r]
       :: else -> printf("MSC: R%d checkpoint CAS conflict, re-reads\n", r)  /* conflict: read again */
       fi;
       wst[r] = 0; cv[r] = 0; crev[r] = 0; cs[r] = 0 }
#elif CKPT == 1
  :: atomic { RUNNING(r) && safe[r] > saved[r] -> kvwrite(safe[r]); saved[r] = safe[r] }
#else
  :: atomic { RUNNING(r) && wst[r] == 0 && safe[r] > saved[r] ->
       cv[r] = kvC; cs[r] = safe[r]; wst[r] = 1 }                          /* read */
  :: atomic { RUNNING(r) && wst[r] == 1 ->
       if :: cs[r] > cv[r] -> kvwrite(cs[r]) :: else -> kvwrite(cv[r]) fi;  /* put max, no CAS */
       saved[r] = cs[r]; wst[r] = 0; cv[r] = 0; cs[r] = 0 }
#endif
  /* crash at any point (between any two steps) */
  :: atomic { RUNNING(r) && !calm && ncrash < MAXCRASH -> ncrash++; reset(r); ph[r] = 0;
       printf("MSC: R%d CRASHES (in-memory ledger, queue lost; in-flight publishes may still land)\n", r) }
  /* HA: replica 0 is the deposed leader; it may stop for good at any time */
  :: atomic { NR == 2 && r == 0 && RUNNING(r) && !calm -> reset(r); ph[r] = 3;
       printf("MSC: R%d (deposed leader) stops for good\n", r) }
  od
}

active proctype Env() {
  byte i, j, v, lim, o; bit ok;
end:
  do
  :: atomic { nw - ndel < NV ->
       objOf[nw] = COBJ(nw - ndel); must[nw] = CMUST(nw - ndel); nw++;
       printf("MSC: Kubernetes writes version RV %d (obj %d, deliver=%d)\n", nw, objOf[nw-1], must[nw-1]) }
#ifdef DEL
  :: atomic { !calm && !ndel && nw > 0 ->    /* delete an object that has a written version */
       v = 0; i = 0;
       do
       :: i < nw -> if :: objOf[i] == 0 -> v = v | 1 :: else -> v = v | 2 fi; i++
       :: else -> break
       od;
       if
       :: v & 1 -> o = 0
       :: v & 2 -> o = 1
       fi;
       ok = 1;
#if WATCHSEES & 2
       /* ASSUMPTION (b) "the instant between a watch's end and the list": no Event written after the
          position of a replica with watched=1 whose watch is ending (its RV compacted: the 410 is
          due) or that is between that 410 and its relist is deleted before the relist */
       j = 0;
       do
       :: j < NR ->
          if
          :: (ph[j] == 1 && watched[j] && wrv[j] < K) || (ph[j] == 2 && gapWatched[j]) ->
             i = wrv[j];
             do
             :: i < nw -> if :: objOf[i] == o && must[i] -> ok = 0 :: else -> skip fi; i++
             :: else -> break
             od
          :: else -> skip
          fi;
          j++
       :: else -> break
       od;
       j = 0;
#endif
       if
       :: ok ->
          objOf[nw] = o; must[nw] = 0; isDel[nw] = 1; ndel = 1; nw++;
          printf("MSC: Kubernetes DELETES obj %d (the deletion is RV %d)\n", objOf[nw-1], nw)
       :: else -> skip                        /* not now (assumption b) */
       fi;
       i = 0; v = 0; o = 0; ok = 0 }
#endif
  :: atomic { !calm && ncomp < MAXCOMP && K < nw ->
#if WATCHSEES & 1
       /* ASSUMPTION (a) "an open watch delivers before compaction": etcd compacts past the RV of
          an open watch with watched=1 only when that watch has seen every change in scope written
          so far (versions to deliver and deletions; FILT1's version counts as out of scope, e.g.
          dropped by a selector pushed to the server: the quiet-scope 410 the rule is for) */
       lim = nw; j = 0;
       do
       :: j < NR ->
          if
          :: ph[j] == 1 && watched[j] && wrv[j] >= K ->
             i = wrv[j];                          /* slot i has RV i+1 > wrv[j] */
             do
             :: i < nw && !must[i] && !isDel[i] -> i++
             :: else -> break
             od;
             if :: i < nw && wrv[j] < lim -> lim = wrv[j] :: else -> skip fi  /* K stays <= wrv[j] */
          :: else -> skip
          fi;
          j++
       :: else -> break
       od;
       j = 0;
#else
       lim = nw;
#endif
       if
       :: K < lim ->
       ncomp++;
       v = K + 1;
       do :: v < lim -> v++ :: break od;       /* any new compaction point in (K, lim] */
       K = v; printf("MSC: etcd compacts history up to RV %d\n", K);
       i = 0;
       do
       :: i < nw ->
          if
          :: RV(i) <= K ->
             j = i + 1;
             do
             :: j < nw && objOf[j] != objOf[i] -> j++
             :: else -> break
             od;
             if :: j < nw && stored[i] == 0 -> compUnstored[i] = 1 :: else -> skip fi  /* superseded: gone */
          :: else -> skip
          fi;
          i++
       :: else -> break
       od
       :: else -> skip                        /* no compaction allowed now */
       fi;
       i = 0; j = 0; v = 0; lim = 0 }
  :: atomic { !calm -> calm = 1; printf("MSC: (no more crashes/compactions/deletions/failures)\n") }
  od
}

/* P1: when everything is quiet (all written, no more crashes, all acked, nothing runs) */
active proctype Quiescent() {
  byte i, g;
  timeout ->
  atomic {
    assert(calm && nw - ndel == NV);
    i = 0;
    do
    :: i < NW ->
       assert(!must[i] || stored[i] > 0 || cov[i]);          /* P1: in stream or covered by a gap */
#ifdef LITERAL
       assert(!must[i] || stored[i] > 0 || compUnstored[i]); /* P1 literal */
#endif
       i++
    :: else -> break
    od;
#ifdef FINALC
    assert(kvC == nw);
#endif
#ifdef NOFALSEGAP
    g = 0;
    do
    :: g < gN ->                 /* every stored gap covers a version really compacted away unstored */
       if
       :: stored[NW + g] > 0 ->
          i = 0;
          do
          :: i < NW && !(gF[g] < RV(i) && RV(i) <= gT[g] && compUnstored[i]) -> i++
          :: else -> break
          od;
          assert(i < NW)
       :: else -> skip
       fi;
       g++
    :: else -> break
    od;
#endif
    skip
  }
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < NR -> run Replica(i); i++
    :: else -> break
    od
  }
}
