/**
 * The registry of session cells (actors): at most one per session, opened on demand and shared by
 * concurrent first accesses, released when unused.
 *
 * - Recovery: the first access of any kind in this process (reads included) records what a
 *   stopped process left open, before anything else uses the session. It never runs on work this
 *   process is doing: a session being created is registered by its creation (`creating`) before
 *   its first record, so every access meanwhile uses that live cell (and sees `creating`).
 * - Checkpoints: a released cell writes its checkpoint when one is due (`checkpointDue`), and so
 *   does a graceful stop for cells kept warm. A cell kept warm by a TTL (never released while the
 *   server runs: TTL 0, or turns coming faster than it) has one written in the background after a
 *   turn once its journal has grown enough (`warmCheckpointDue`, BRAIN_CHECKPOINT_AFTER_BYTES): of
 *   its state as that turn left it, by one saver for the whole server, never holding a request or
 *   the session's next turn. Saves of one session never overlap: each waits for the one before.
 * - Release: an unused cell with no turn is released after its idle TTL, or kept (TTL 0). Without
 *   a TTL it is released once unused for a short grace (`graceMs`: a client driving a session
 *   sends its next request about then, and would otherwise reopen it), or at once with none; and a
 *   cell whose state the projection's cache could not keep (larger than its whole share) is kept,
 *   rather than rebuilt at its next turn. Cells kept warm and idle share a
 *   byte budget; past it the least recently used are released early (warmth buys latency only; a
 *   released session reopens on its next access).
 * - A failed write breaks the cell: it refuses every later use, and once its last user has gone
 *   the journal is reset and the cell dropped, so the next access reopens the session from what
 *   is really stored and records the recovery of the interrupted work. While the disk still
 *   refuses writes, that access fails with `journal_write_failed`; once it accepts them, the
 *   session works again, without a restart. A creation whose first record failed is no session
 *   (nobody was given its id): it is removed, and nothing of it is remembered (`abandon`).
 * - Delete: admitted in one synchronous step, before its teardown; from then on every access
 *   answers `not_found`, a cell in use then is never remembered when released, and nothing of the
 *   session is served from memory. A teardown that fails gives the session back as it was.
 */
import { Cause, Deferred, Duration, Effect, Exit, FiberId, FiberMap, FiberSet, Option, type Scope } from "effect"
import * as Refusal from "../../domain/Errors.js"
import type { SessionStorageError } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import type { SessionState } from "../../domain/Projection.js"
import { needsRecovery, recoveryEntries } from "../../domain/Recovery.js"
import type { JournalShape } from "../../services/Journal.js"
import type { ProjectionShape } from "../../services/Projection.js"
import { OPEN_HEAP_PER_BYTE } from "../../domain/Limits.js"
import type { WorkingMemory } from "../WorkingMemory.js"
import { Cell, commit } from "./Cell.js"
import { checkpointDue, warmCheckpointDue } from "./Checkpoints.js"
import { fromJournal, notFound } from "./FromJournal.js"
import { type View, viewOf, Views } from "./Views.js"

const brokenFailure = () =>
  new Refusal.JournalWriteFailed({
    message: "a write to this session's journal failed; the session recovers on its next access once the disk accepts writes"
  })

export interface RegistryOptions {
  readonly journal: JournalShape
  readonly projection: ProjectionShape
  /** The server-wide idle TTL (undefined = release once idle for `graceMs`, 0 = keep). */
  readonly idleTtlMs: number | undefined
  /**
   * Without a TTL, how long an unused cell stays in memory before it is released, within the warm
   * share (SESSION_RELEASE_GRACE_MS; between this and twice this). Omitted or 0: released at once.
   */
  readonly graceMs?: number
  /** Bytes of idle cells kept warm by a TTL before the least recently used are released. */
  readonly warmBytes: number
  /**
   * The working-memory admission (BRAIN_WORKING_MEMORY_BYTES): an open holds its share, weighed
   * by the bytes it will read (Projection.openBytes, OPEN_HEAP_PER_BYTE each), while it reads them.
   */
  readonly workingMemory?: WorkingMemory
  /** Bytes of released sessions' views (Views.ts) kept for their reads; none kept when omitted. */
  readonly viewBytes?: number
  /**
   * Bytes of the projection's cache of released states (its share of BRAIN_CACHE_BYTES): a session
   * released at once (no TTL) whose state is larger is kept warm instead, within `warmBytes`.
   * Omitted: every such session is released to the projection.
   */
  readonly releasedBytes?: number
  /**
   * Journal bytes a cell kept warm by a TTL appends after its last checkpoint before one is written
   * in the background after a turn, at least that checkpoint's bytes (BRAIN_CHECKPOINT_AFTER_BYTES,
   * `warmCheckpointDue`). Omitted or 0: none while it is warm (its release and a stop write one).
   */
  readonly checkpointAfterBytes?: number
}

/** A warm cell's checkpoint waiting for the saver: its state as a turn left it, and the journal's size then. */
interface DueWarm {
  readonly cell: Cell
  readonly state: SessionState
  readonly bytes: number
}

export const makeRegistry = (options: RegistryOptions): Effect.Effect<Registry, never, Scope.Scope> =>
  Effect.zipWith(FiberMap.make<SessionId>(), FiberSet.make(), (timers, sweeps) => new Registry(options, timers, sweeps))

/**
 * A session's cell in this process: `settled` is how its open ended, read without an effect once
 * it has; `opened` answers those who wait for an open under way, made by the first of them (an
 * open nobody waits for, as most are, makes none: a Deferred costs about 4 µs to make on this
 * runtime, docs/benchmarks.md "Objects spread with new fields").
 */
interface Slot {
  opened: Deferred.Deferred<Cell, SessionStorageError> | undefined
  settled: Exit.Exit<Cell, SessionStorageError> | undefined
}

export class Registry {
  private readonly cells = new Map<SessionId, Slot>()
  /**
   * Sessions checked for interrupted work by this process: once per claim on them, since the
   * journal core claims a session once and never again by itself (Core.ts); a recovery written
   * after another owner's claim is refused by the store's fence.
   */
  private readonly checked = new Set<SessionId>()
  /** Sessions whose cell broke on a failed write: their recovery says so, not "the server stopped". */
  private readonly broken = new Set<SessionId>()
  /**
   * Where each session's last checkpoint written by this process is: its sequence and the journal's
   * size then, and once it is written, its own bytes (`written`).
   */
  private readonly checkpointedAt = new Map<SessionId, { readonly sequence: number; readonly bytes: number; readonly written?: number }>()
  /**
   * Warm cells due a checkpoint, waiting for the saver (`checkpointWarmLater`), first due first;
   * one per session, the latest state a turn left.
   */
  private readonly dueWarm = new Map<SessionId, DueWarm>()
  /** The saver of warm cells' checkpoints while it runs (one for the whole server): given when it ends. */
  private saver: Deferred.Deferred<void> | undefined = undefined
  /** Each session's latest checkpoint save (a release's, the saver's or a stop's) until it is over. */
  private readonly saving = new Map<SessionId, Deferred.Deferred<void>>()
  /** A graceful stop is writing the warm cells' checkpoints: the saver takes no more. */
  private stopping = false
  /** Idle cells kept warm by a TTL, least recently used first, with the bytes each was counted at. */
  private readonly warm = new Map<Cell, number>()
  private warmTotal = 0
  /**
   * Of the warm cells, those kept by the grace alone (no TTL), each with the sweep period it was
   * released in: a sweep releases those released before the previous sweep (`sweepGrace`).
   */
  private readonly graced = new Map<Cell, number>()
  /** Sweeps of the graced cells so far; whether one is scheduled. */
  private period = 0
  private sweeping = false
  /** Sessions being deleted (admitted, not finished): every access answers not_found. */
  private readonly deleting = new Set<SessionId>()
  /** What reads of released sessions need of their states (Views.ts). */
  private readonly views: Views

  constructor(
    private readonly options: RegistryOptions,
    private readonly timers: FiberMap.FiberMap<SessionId>,
    private readonly sweeps: FiberSet.FiberSet
  ) {
    this.views = new Views(options.viewBytes ?? 0)
  }

  /** Cells in memory (warm or in use). */
  get size() {
    return this.cells.size
  }

  /**
   * Sessions this registry keeps anything of: a cell, a check, a broken mark, a checkpoint
   * position or a delete under way. Bounded by the sessions that exist (tests check it).
   */
  get remembered() {
    return new Set<SessionId>([...this.cells.keys(), ...this.checked, ...this.broken, ...this.checkpointedAt.keys(), ...this.dueWarm.keys(), ...this.deleting, ...this.views.sessions()]).size
  }

  private ttlOf(cell: Cell) {
    return cell.state.configuration?.idle_ttl_ms ?? this.options.idleTtlMs
  }

  /**
   * The session's cell when it is open in memory and not refused (nothing is opened, nothing
   * taken). A refused cell (its write failed, its session being deleted) is left to the access,
   * which answers its refusal: a caller must not tell of the session's state first.
   */
  opened(session: SessionId): Cell | undefined {
    const settled = this.cells.get(session)?.settled
    return settled !== undefined && Exit.isSuccess(settled) && refusal(settled.value) === undefined ? settled.value : undefined
  }

  /**
   * The heap a use of the session takes to reach its state: its state's bytes when its cell is in
   * memory, else what its open reads, OPEN_HEAP_PER_BYTE per byte (Projection.openBytes).
   */
  openWeight(session: SessionId): Effect.Effect<number> {
    const cell = this.opened(session)
    if (cell !== undefined) return Effect.succeed(cell.state.bytes)
    const { projection } = this.options
    return projection.openBytes === undefined ? Effect.succeed(0) : Effect.map(projection.openBytes(session), (bytes) => bytes * OPEN_HEAP_PER_BYTE)
  }

  /** Loads the state (its open admitted by the working memory unless `admitted`: its caller holds its share). */
  private load(session: SessionId, admitted: boolean): Effect.Effect<Cell, SessionStorageError> {
    const { projection, workingMemory } = this.options
    const open = Effect.gen(() => this.loadOf(session))
    // Many opens of large sessions at once took more heap than the process has: each waits for
    // its share, in order, or is refused overloaded having read nothing.
    const weighed = admitted || workingMemory === undefined || projection.openBytes === undefined
      ? open
      : Effect.flatMap(projection.openBytes(session), (bytes) =>
        workingMemory.holding(bytes * OPEN_HEAP_PER_BYTE, `this session's open (${bytes} bytes to read)`, () => open))
    return weighed.pipe(Effect.catchTags({
      // Loading is not the request's own effect: a failure here changed nothing it asked for.
      SessionNotFound: (e) => Effect.fail(fromJournal(e, { ambiguous: false })),
      JournalCorrupt: (e) => Effect.fail(fromJournal(e, { ambiguous: false })),
      JournalUnavailable: (e) => Effect.fail(fromJournal(e, { ambiguous: false })),
      JournalWriteFailed: (e) => Effect.fail(fromJournal(e, { ambiguous: false })),
      RecordRejected: (e) => Effect.fail(fromJournal(e, { ambiguous: false }))
    }))
  }

  /** Loads the state, recovering interrupted work first if this process has not yet looked. */
  private *loadOf(session: SessionId) {
    const { journal, projection } = this.options
    const { state } = yield* projection.state(session)
    // A journal with no creation record is a create that never finished: nobody was given its id.
    if (state.status === "none") return yield* Effect.fail(notFound())
    const cell = new Cell(session, state)
    if (!this.checked.has(session) && needsRecovery(state)) {
      yield* commit(journal, cell, recoveryEntries(state, this.broken.has(session) ? "write_failure" : "restart")).pipe(
        // The journal is broken now: let the next access reopen it and try again.
        Effect.tapError(() => journal.reset(session))
      )
    }
    this.checked.add(session)
    this.broken.delete(session)
    return cell
  }

  /**
   * The session's cell, opened on demand and shared; the caller must `release` it. `admitted`:
   * the caller holds the working memory an open takes (a turn weighed with it), so an open it
   * makes does not wait for more.
   */
  acquire(session: SessionId, admitted = false): Effect.Effect<Cell, SessionStorageError> {
    return Effect.suspend(() => {
      if (this.deleting.has(session)) return Effect.fail(notFound())
      const existing = this.cells.get(session)
      if (existing) {
        // An opened cell is taken as it is; an open under way is waited for.
        if (existing.settled !== undefined) return Effect.flatMap(existing.settled, this.use)
        existing.opened ??= Deferred.unsafeMake<Cell, SessionStorageError>(FiberId.none)
        return Effect.flatMap(Deferred.await(existing.opened), this.use)
      }
      const slot: Slot = { opened: undefined, settled: undefined }
      this.cells.set(session, slot)
      // The opener takes the cell from its own load; others wait on `opened`.
      return this.load(session, admitted).pipe(
        Effect.exit,
        Effect.flatMap((exit) => {
          if (Exit.isFailure(exit) && this.cells.get(session) === slot) this.cells.delete(session)
          slot.settled = exit
          if (slot.opened !== undefined) Deferred.unsafeDone(slot.opened, exit)
          return exit
        }),
        Effect.uninterruptible,
        Effect.flatMap(this.use)
      )
    })
  }

  /**
   * `acquire` of a session whose cell is open in memory, taken in this synchronous step: the cell,
   * its use taken (the caller must `release` it), or undefined, having taken nothing, when the
   * cell is not open, is refused, or is kept by a TTL whose timer its use must stop (the caller
   * then goes through `acquire`).
   */
  takeOpened(session: SessionId): Cell | undefined {
    if (this.deleting.has(session) || FiberMap.unsafeHas(this.timers, session)) return undefined
    const cell = this.opened(session)
    if (cell === undefined) return undefined
    cell.users++
    this.unwarm(cell)
    return cell
  }

  /** Takes a use of an opened cell (refused when it broke or its session is being deleted). */
  private readonly use = (cell: Cell): Effect.Effect<Cell, SessionStorageError> => {
    const refused = refusal(cell)
    if (refused !== undefined) return Effect.fail(refused)
    cell.users++
    this.unwarm(cell)
    // Only a cell kept by a TTL has a timer to stop.
    return FiberMap.unsafeHas(this.timers, cell.session) ? Effect.as(FiberMap.remove(this.timers, cell.session), cell) : Effect.succeed(cell)
  }

  /**
   * Registers the cell of a session being created, before its first record, held by its creation
   * until `adopt` or `abandon`: every access meanwhile uses this cell (not_found until the first
   * record, then `creating`), and none recovers the creation, which is live.
   */
  creating(cell: Cell): Effect.Effect<void> {
    return Effect.sync(() => {
      this.checked.add(cell.session)
      this.cells.set(cell.session, { opened: undefined, settled: Exit.succeed(cell) })
      cell.users++
    })
  }

  /** Releases the creation's hold on the cell of a session whose creation is recorded closed. */
  adopt(cell: Cell): Effect.Effect<void> {
    return this.release(cell)
  }

  /**
   * Releases the creation's hold on the cell of a session whose creation could not be recorded
   * whole. One whose first record was never written is no session (nobody was given its id): its
   * journal is removed and nothing of it is remembered, and this answers true. Otherwise (a
   * record written, or the removal failed) the cell is broken: once unused the journal is reset
   * and the next access reopens the session and records the creation failed.
   */
  abandon(cell: Cell): Effect.Effect<boolean> {
    return Effect.suspend(() => {
      const broken = () => {
        cell.broken = true
        return Effect.as(this.release(cell), false)
      }
      // Until it is gone, accesses answer not_found (`refusal`: no creation record).
      if (cell.state.status !== "none") return broken()
      return Effect.flatMap(Effect.either(this.options.journal.remove(cell.session)), (removed) => {
        if (removed._tag === "Left") return broken()
        // Released as a deleted session is: forgotten, never remembered.
        cell.deleted = true
        this.checked.delete(cell.session)
        this.broken.delete(cell.session)
        this.checkpointedAt.delete(cell.session)
        this.views.forget(cell.session)
        return Effect.as(this.release(cell), true)
      })
    })
  }

  /**
   * Drops a use; an unused cell with no turn is released after its TTL, or kept (TTL 0); without
   * a TTL, after the grace (`graceMs`, within the warm share), or now.
   */
  release(cell: Cell): Effect.Effect<void> {
    return Effect.suspend(() => {
      cell.users--
      if (cell.users > 0 || cell.running) return Effect.void
      const ttl = this.ttlOf(cell)
      if (cell.broken || cell.deleted) return this.evict(cell)
      if (ttl === undefined) {
        if (!this.tooBigToRelease(cell)) return this.graceOf(cell)
        // Released, its state would be dropped by the projection's cache, and its next turn would
        // parse its checkpoint and fold again (hundreds of ms at the key bound): it stays warm, in
        // the warm share, until that share needs the room; its checkpoint is written as a
        // release would write it.
        this.keepWarm(cell)
        return Effect.zipRight(
          Effect.zipRight(this.options.projection.forget(cell.session), Effect.gen(() => this.checkpointIfDue(cell))),
          this.trimWarm()
        )
      }
      this.keepWarm(cell)
      const trim = this.trimWarm()
      const kept = ttl === 0 ? trim : Effect.zipRight(
        FiberMap.run(this.timers, cell.session, Effect.interruptible(Effect.zipRight(Effect.sleep(Duration.millis(ttl)), this.evict(cell)))),
        trim
      )
      const after = this.options.checkpointAfterBytes ?? 0
      return after > 0 ? Effect.zipRight(this.checkpointWarmLater(cell, after), kept) : kept
    })
  }

  /**
   * An unused cell with no TTL: kept for the grace when it fits the warm share (its state, which
   * its release would have given the projection's cache, held here instead: the cache's older copy
   * is dropped), its checkpoint written as its release would write it; released now otherwise.
   */
  private graceOf(cell: Cell): Effect.Effect<void> {
    const graceMs = this.options.graceMs ?? 0
    if (graceMs <= 0 || cell.state.bytes > this.options.warmBytes) return this.evict(cell)
    this.keepWarm(cell)
    this.graced.set(cell, this.period)
    const kept = Effect.zipRight(this.options.projection.forget(cell.session), Effect.gen(() => this.checkpointIfDue(cell)))
    const trimmed = this.warmTotal > this.options.warmBytes ? Effect.zipRight(kept, this.trimWarm()) : kept
    if (this.sweeping) return trimmed
    this.sweeping = true
    // Interruptible whatever the region it was started from (a turn's close): the registry's scope ends it.
    return Effect.zipRight(trimmed, FiberSet.run(this.sweeps, Effect.interruptible(this.sweepGrace(graceMs))))
  }

  /**
   * Every `graceMs`, releases the graced cells released before the previous sweep (unused since
   * between one and two periods); ends once none is left, and the next grace starts it again.
   */
  private sweepGrace(graceMs: number): Effect.Effect<void> {
    const sweep = Effect.suspend((): Effect.Effect<boolean> => {
      const period = ++this.period
      const due: Array<Cell> = []
      for (const [cell, released] of this.graced) if (released <= period - 2) due.push(cell)
      const more = () => {
        if (this.graced.size > 0) return true
        this.sweeping = false
        return false
      }
      if (due.length === 0) return Effect.sync(more)
      return Effect.zipRight(Effect.forEach(due, (cell) => this.graced.has(cell) ? this.evict(cell) : Effect.void, { discard: true }), Effect.sync(more))
    })
    return Effect.asVoid(Effect.repeat(Effect.zipRight(Effect.sleep(Duration.millis(graceMs)), sweep), { while: (more) => more }))
  }

  using<A, E>(session: SessionId, body: (cell: Cell) => Effect.Effect<A, E>, admitted = false): Effect.Effect<A, E | SessionStorageError> {
    return Effect.acquireUseRelease(this.acquire(session, admitted), body, (cell) => this.release(cell))
  }

  /**
   * A read of a session (its summary, transcript or Events) that neither activates it nor keeps it
   * warm (seed, "Suspension and recovery": reads do not activate it): a cell already in memory is
   * read as it is, its use and TTL untouched; one the read had to open is dropped again once
   * nothing else uses it, whatever its TTL.
   */
  reading<A, E>(session: SessionId, body: (cell: Cell) => Effect.Effect<A, E>): Effect.Effect<A, E | SessionStorageError> {
    return Effect.suspend(() => {
      if (this.deleting.has(session)) return Effect.fail(notFound())
      const settled = this.cells.get(session)?.settled
      if (settled !== undefined && Exit.isSuccess(settled)) {
        const cell = settled.value
        const refused = refusal(cell)
        return refused === undefined ? body(cell) : Effect.fail(refused)
      }
      return Effect.acquireUseRelease(this.acquire(session), body, (cell) =>
        Effect.suspend(() => {
          cell.users--
          return cell.users > 0 || cell.running ? Effect.void : this.evict(cell)
        }))
    })
  }

  /**
   * What a read of the session's Events needs of its state (Views.ts): its cell's when it is in
   * memory, else the view its release kept, else the state read (`reading`), which keeps one. A
   * view may be behind the journal: the reader folds on from it.
   */
  view(session: SessionId): Effect.Effect<View, SessionStorageError> {
    return Effect.suspend(() => {
      if (!this.deleting.has(session) && !this.cells.has(session)) {
        const kept = this.views.get(session)
        if (kept !== undefined && kept.status !== "none") return Effect.succeed(kept)
      }
      return this.reading(session, (cell) => Effect.succeed(viewOf(cell.state)))
    })
  }

  /**
   * The view its release kept of a session not in memory, when it is still the session's whole
   * state as of the journal's durable end (nothing was written since): a status read answered
   * from it reads nothing else. Undefined otherwise (then the state is read).
   */
  currentView(session: SessionId): Effect.Effect<View | undefined> {
    return Effect.suspend(() => {
      if (this.deleting.has(session) || this.cells.has(session)) return Effect.succeed(undefined)
      const kept = this.views.get(session)
      if (kept === undefined || kept.status === "none") return Effect.succeed(undefined)
      return Effect.map(Effect.option(this.options.journal.lastSequence(session)), (last) =>
        Option.isSome(last) && last.value === kept.lastSequence && this.views.get(session) === kept ? kept : undefined)
    })
  }

  /**
   * Whether the cell's state is larger than the projection's whole cache of released states (which
   * would not keep it) and fits the warm share: a session with tens of thousands of idempotency
   * keys (at BRAIN_MAX_SESSION_IDEMPOTENCY_KEYS, about 40 MiB against a default share of 36 MiB).
   */
  private tooBigToRelease(cell: Cell): boolean {
    const { releasedBytes, warmBytes } = this.options
    return releasedBytes !== undefined && cell.state.bytes > releasedBytes && cell.state.bytes <= warmBytes
  }

  private keepWarm(cell: Cell) {
    this.unwarm(cell)
    this.warm.set(cell, cell.state.bytes)
    this.warmTotal += cell.state.bytes
  }

  private unwarm(cell: Cell) {
    const bytes = this.warm.get(cell)
    if (bytes === undefined) return
    this.warm.delete(cell)
    this.graced.delete(cell)
    this.warmTotal -= bytes
  }

  /**
   * Past the warm budget: releases idle cells, those kept by the grace alone first (they would
   * have been released at once before the grace, and must not push out cells kept by a TTL), then
   * the least recently used.
   */
  private trimWarm(): Effect.Effect<void> {
    return Effect.suspend(() => {
      const victims = new Set<Cell>()
      let total = this.warmTotal
      for (const pool of [this.graced.keys(), this.warm.keys()]) {
        for (const cell of pool) {
          if (total <= this.options.warmBytes) break
          if (victims.has(cell)) continue
          victims.add(cell)
          total -= this.warm.get(cell) ?? 0
        }
      }
      return Effect.forEach(victims, (cell) => Effect.zipRight(FiberMap.remove(this.timers, cell.session), this.evict(cell)), {
        discard: true
      })
    })
  }

  /** Releases an unused cell: its state goes to the projection cache (and a checkpoint when due). */
  private evict(cell: Cell): Effect.Effect<void> {
    return Effect.gen(() => this.evictOf(cell))
  }

  private *evictOf(cell: Cell) {
    const { journal, projection } = this.options
    if (cell.users > 0 || cell.running) return
    this.unwarm(cell)
    // An open still under way is left to its opener.
    const settled = this.cells.get(cell.session)?.settled
    if (settled !== undefined && (Exit.isFailure(settled) || settled.value === cell)) this.cells.delete(cell.session)
    if (cell.deleted) return
    if (cell.broken) {
      // Nothing of this cell is trusted: the next access reopens the journal and recovers.
      this.checked.delete(cell.session)
      this.broken.add(cell.session)
      this.checkpointedAt.delete(cell.session)
      this.views.forget(cell.session)
      yield* projection.forget(cell.session)
      return yield* journal.reset(cell.session)
    }
    this.views.keep(cell.session, cell.state)
    yield* projection.remember(cell.session, cell.state)
    yield* this.checkpointIfDue(cell)
  }

  /** Writes a checkpoint of the cell's state when one is due (`checkpointDue`); true when it wrote one. */
  private *checkpointIfDue(cell: Cell) {
    const { journal } = this.options
    const state = cell.state
    const last = this.checkpointedAt.get(cell.session)
    // A journal that cannot say its size is checkpointed by records alone.
    const bytes = yield* Effect.orElseSucceed(journal.size(cell.session), () => last?.bytes ?? 0)
    const since = { records: state.lastSequence - (last?.sequence ?? 0), bytes: bytes - (last?.bytes ?? 0) }
    if (!checkpointDue(since, state.bytes)) return false
    this.checkpointedAt.set(cell.session, { sequence: state.lastSequence, bytes })
    // The saver's older state of this session, not yet taken, is not written after this one.
    const waiting = this.dueWarm.get(cell.session)
    if (waiting !== undefined && waiting.state.lastSequence <= state.lastSequence) this.dueWarm.delete(cell.session)
    return yield* this.saveCheckpoint(cell.session, state)
  }

  /**
   * Saves the checkpoint of `state`, once the session's save before it (if one is under way) is
   * over: saves of one session never overlap, and each is of a state at least as recent as the one
   * before (each caller's state is the cell's as it calls). True when it was written. Never
   * required: a save that fails for any reason (the disk, or a defect in encoding) is logged and
   * the cell goes on; it must never fail the request whose release wrote it, nor any turn.
   */
  private saveCheckpoint(session: SessionId, state: SessionState): Effect.Effect<boolean> {
    return Effect.uninterruptibleMask((restore) =>
      Effect.suspend(() => {
        const before = this.saving.get(session)
        const mine = Deferred.unsafeMake<void>(FiberId.none)
        this.saving.set(session, mine)
        const save = this.options.projection.checkpoint(session, state).pipe(
          Effect.map((written) => {
            const at = this.checkpointedAt.get(session)
            if (written !== undefined && at !== undefined && at.sequence === state.lastSequence) {
              this.checkpointedAt.set(session, { sequence: at.sequence, bytes: at.bytes, written })
            }
            return true
          }),
          Effect.catchAllCause((cause) =>
            Cause.isInterruptedOnly(cause) ? Effect.succeed(false) : Effect.as(
              Effect.logWarning("a checkpoint was not written; the previous one (or none) stays, and the journal holds everything", cause).pipe(
                Effect.annotateLogs({ session_id: session, through: state.lastSequence })
              ),
              false
            )
          )
        )
        return restore(before === undefined ? save : Effect.zipRight(Deferred.await(before), save)).pipe(
          Effect.catchAllCause(() => Effect.succeed(false)),
          Effect.ensuring(Effect.sync(() => {
            if (this.saving.get(session) === mine) this.saving.delete(session)
            Deferred.unsafeDone(mine, Exit.void)
          }))
        )
      })
    )
  }

  /** Waits for the session's checkpoint saves under way, if any, to be over. */
  private savesOf(session: SessionId): Effect.Effect<void> {
    return Effect.suspend(() => {
      const latest = this.saving.get(session)
      return latest === undefined ? Effect.void : Deferred.await(latest)
    })
  }

  /**
   * After a turn of a cell kept warm by a TTL (its release, no turn running): when its journal grew
   * enough since its last checkpoint (`warmCheckpointDue`, `after` bytes at least), hands its state
   * as the turn left it, with the journal's size, to the saver, and starts the saver unless it
   * runs. The release (and the turn's close) never waits for a save: this reads the journal's size
   * (an open journal's, from memory) and forks the saver at most. The state is a committed one: every
   * record folded into it is durable (no turn runs, nothing is staged), and a state is never
   * changed once folded (Projection.ts), so what is saved is exactly the fold through its
   * `lastSequence`, whatever turns run meanwhile. A journal that cannot say its size (not open) is
   * left to the release.
   */
  private checkpointWarmLater(cell: Cell, after: number): Effect.Effect<void> {
    if (this.stopping || cell.broken || cell.deleted) return Effect.void
    if (cell.running !== undefined || cell.opening !== undefined || cell.riding !== undefined) return Effect.void
    const state = cell.state
    if (state.status === "none" || state.lastSequence < 1) return Effect.void
    const last = this.checkpointedAt.get(cell.session)
    if (last !== undefined && last.sequence >= state.lastSequence) return Effect.void
    return Effect.flatMap(Effect.option(this.options.journal.size(cell.session)), (size) => {
      if (Option.isNone(size) || cell.state !== state || this.stopping) return Effect.void
      if (!warmCheckpointDue(size.value - (last?.bytes ?? 0), last?.written ?? state.bytes, after)) return Effect.void
      this.dueWarm.set(cell.session, { cell, state, bytes: size.value })
      if (this.saver !== undefined) return Effect.void
      const saver = Deferred.unsafeMake<void>(FiberId.none)
      this.saver = saver
      // Interruptible whatever the region it was started from (a turn's close): the registry's scope ends it.
      return Effect.asVoid(FiberSet.run(this.sweeps, Effect.interruptible(this.saveWarm(saver))))
    })
  }

  /** The next warm checkpoint due, taken; undefined (the saver ending, in the same step) when none is, or a stop has begun. */
  private takeDueWarm(saver: Deferred.Deferred<void>): DueWarm | undefined {
    if (!this.stopping) {
      for (const [session, due] of this.dueWarm) {
        this.dueWarm.delete(session)
        return due
      }
    }
    this.saverEnded(saver)
    return undefined
  }

  /** The saver `saver` has ended (a later one may run already: it is left alone). */
  private saverEnded(saver: Deferred.Deferred<void>) {
    if (this.saver === saver) this.saver = undefined
    Deferred.unsafeDone(saver, Exit.void)
  }

  /**
   * The saver: writes the warm cells' checkpoints due, one after another, until none is left.
   * One at a time for the whole server: a checkpoint encodes a whole state on the main thread (in
   * pieces, between its writes) and syncs a file, and sessions due at once do not add up.
   */
  private saveWarm(saver: Deferred.Deferred<void>): Effect.Effect<void> {
    return Effect.gen(this, function*() {
      for (;;) {
        const due = yield* Effect.sync(() => this.takeDueWarm(saver))
        if (due === undefined) return
        const { bytes, cell, state } = due
        const session = cell.session
        // Deleted, broken or released since (its release wrote what was due), or checkpointed since.
        if (cell.broken || cell.deleted || this.deleting.has(session) || this.opened(session) !== cell) continue
        const last = this.checkpointedAt.get(session)
        if (last !== undefined && last.sequence >= state.lastSequence) continue
        // Until this one is written, the next waits on the size of the one before (or of the state).
        const previous = last?.written
        this.checkpointedAt.set(session, previous === undefined ? { sequence: state.lastSequence, bytes } : { sequence: state.lastSequence, bytes, written: previous })
        yield* this.saveCheckpoint(session, state)
      }
    }).pipe(Effect.ensuring(Effect.sync(() => this.saverEnded(saver))))
  }

  /**
   * A graceful stop's last step (main.ts): writes the checkpoint of each cell kept warm by a TTL
   * that is due one, as its release would have, one after another, most recently used first.
   * Without it a warm session stopped by SIGTERM had none, and its next open folded its whole
   * journal. Answers how many it wrote. Unbounded: its caller bounds it with a timeout (a
   * checkpoint cut short leaves the previous one, or none, and a temporary file the next save
   * removes).
   */
  readonly checkpointWarm: Effect.Effect<number> = Effect.gen(this, function*() {
    // The saver stops after the save under way, which this waits for; what it had not taken yet is
    // written below if due, of the cells' latest states.
    this.stopping = true
    this.dueWarm.clear()
    if (this.saver !== undefined) yield* Deferred.await(this.saver)
    let written = 0
    for (const cell of [...this.warm.keys()].reverse()) {
      if (cell.users > 0 || cell.running || cell.broken || cell.deleted || !this.warm.has(cell)) continue
      if (yield* this.checkpointIfDue(cell)) written++
    }
    return written
  })

  /**
   * Deletes a session exclusively. Admission is one synchronous step (of concurrent deletes
   * sharing the cell, one is admitted, the others are not_found): `admit` may refuse; once
   * admitted, every access answers not_found while `prepare` runs (the teardown) and then
   * `remove`. A `prepare` that fails gives the session back as it was.
   */
  delete<E0, E1, E2>(
    session: SessionId,
    admit: (cell: Cell) => E0 | undefined,
    prepare: (cell: Cell) => Effect.Effect<void, E1>,
    remove: Effect.Effect<void, E2>
  ): Effect.Effect<void, E0 | E1 | E2 | SessionStorageError> {
    // Uninterruptible from admission to the end but for the teardown, so that an admitted delete
    // always either finishes or gives the session back.
    return Effect.uninterruptibleMask((restore) =>
      Effect.gen(this, function*() {
        yield* this.using(session, (cell) =>
          Effect.suspend((): Effect.Effect<void, E0 | E1 | SessionStorageError> => {
            if (cell.deleted || this.deleting.has(session)) return Effect.fail(notFound())
            const refused = admit(cell)
            if (refused !== undefined) return Effect.fail(refused)
            cell.deleted = true
            this.deleting.add(session)
            return restore(prepare(cell)).pipe(Effect.onError(() =>
              Effect.sync(() => {
                cell.deleted = false
                this.deleting.delete(session)
              })
            ))
          }))
        yield* Effect.gen(this, function*() {
          this.cells.delete(session)
          this.checked.delete(session)
          this.broken.delete(session)
          this.checkpointedAt.delete(session)
          this.dueWarm.delete(session)
          this.views.forget(session)
          yield* FiberMap.remove(this.timers, session)
          yield* this.options.projection.forget(session)
          // A checkpoint save under way would write into the directory being removed.
          yield* this.savesOf(session)
          yield* remove
        }).pipe(Effect.ensuring(Effect.sync(() => this.deleting.delete(session))))
      })
    )
  }
}

/**
 * Why an opened cell is refused: its write failed, its session is being deleted, or it has no
 * creation record yet (a create that has written nothing: nobody was given its id).
 */
const refusal = (cell: Cell): SessionStorageError | undefined =>
  cell.broken ? brokenFailure() : cell.deleted || cell.state.status === "none" ? notFound() : undefined
