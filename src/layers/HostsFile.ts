/**
 * The host registry (services/Hosts.ts; docs/environments.md, "The `host` driver").
 *
 * - Registrations: one JSON line each in `{dataDir}/hosts/registrations.jsonl` (hosts/Registrations.ts
 *   has the lines), appended and fsynced before `register` answers, read back at start (a torn
 *   last line — a registration that never answered — is ignored). The token itself is never
 *   stored. At most MAX_HOSTS at once. A removal (by the host, the idle expiry or an operator) is a
 *   line fsynced before it counts, and the registration is gone for good. At start, a file with
 *   more lines than it needs is rewritten with only what stands (a new file, synced, then renamed
 *   over the old).
 * - Idle expiry: a registration that has had no command stream for `idleExpiryMs` and that no
 *   existing session names is removed. The clock is on file: a stream's opening is fsynced before
 *   its `ready` frame, its close appended after (`idle_since_ms`). A host whose stream was open when
 *   the server stopped (or whose close was not written) counts as connected until this start,
 *   which is recorded, so a restart moves its clock once and never again. A session's naming is
 *   fsynced before the session's first record (`use`) and released when it is deleted; a sweep
 *   drops a naming whose session no longer exists (a release lost in a crash, a create cut off).
 * - Connections: a host has at most one command stream; a new one replaces it. Every call in flight
 *   belongs to the stream it was written to; when that stream is over, each of its calls fails
 *   `EnvironmentUncertain` `connection_lost` (it may have run) and is forgotten, so a late result is
 *   refused and nothing is ever written to another stream.
 * - Calls in flight are kept per host, named `{session_id, sequence}`: a host reaches only its own.
 *   A call's Events and its result pass one at a time through the call's lock, so an Event posted
 *   (and not yet answered) before the result is committed before the outcome.
 */
import * as crypto from "node:crypto"
import * as path from "node:path"
import { Chunk, Clock, Deferred, Duration, Effect, Exit, FiberId, Layer, Option, Queue, type Scope } from "effect"
import {
  Conflict,
  Internal,
  InvalidRequest,
  JournalCorrupt,
  JournalWriteFailed,
  NotFound,
  Overloaded,
  PayloadTooLarge,
  Unauthorized
} from "../domain/Errors.js"
import type { Failure } from "../domain/Failure.js"
import { type HostId, mintHostId, type SessionId } from "../domain/Ids.js"
import {
  HOST_COMMAND_QUEUE,
  HOST_EXPIRY_SWEEP_MIN_MS,
  HOST_EXPIRY_SWEEP_MS,
  HOST_RECORDS_QUEUE,
  HOST_TOKEN_BYTES,
  MAX_HOSTS
} from "../domain/Limits.js"
import {
  type CallAnswer,
  type CancelAnswer,
  type EnvironmentCall,
  EnvironmentNotSent,
  EnvironmentUncertain
} from "../services/Environments.js"
import { type CallName, type HostAnswer, type HostEventError, Hosts, type HostsShape, type ResultError } from "../services/Hosts.js"
import { Journal } from "../services/Journal.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { CommandStreamBody } from "./hosts/CommandStream.js"
import {
  appendDurably,
  connectedLine,
  idleLine,
  idleSince,
  linesOf,
  namedLine,
  readRegistrations,
  registrationLine,
  registrationsFile,
  releasedLine,
  removalLine,
  type RemovedBy,
  rewriteDurably
} from "./hosts/Registrations.js"
import { namedFrame as frame } from "./sessions/SseFrames.js"
import { waitFor } from "./Waits.js"

export interface HostsOptions {
  /** Where registrations are kept; undefined: in memory only (tests). */
  readonly dataDir: string | undefined
  /** Milliseconds a cancel waits for the host's confirmation (BRAIN_CANCEL_GRACE_MS). */
  readonly graceMs: number
  /** Milliseconds between heartbeat comments on a command stream (BRAIN_SSE_HEARTBEAT_MS); 0: none. */
  readonly heartbeatMs: number
  /** Bytes of a result's `ok`/`error` value (as JSON) at most (BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES). */
  readonly maxResultBytes: number
  /**
   * Milliseconds a registration may stand with no command stream and no existing session naming it
   * before it is removed (BRAIN_HOST_IDLE_EXPIRY_SECS); 0 or undefined: never.
   */
  readonly idleExpiryMs?: number | undefined
  /**
   * Whether a session still exists (the journal's `exists`): a naming whose session is gone no
   * longer holds its host. Undefined: every recorded naming holds (the journal is read when the
   * layer is built, if it has one).
   */
  readonly sessionExists?: ((session: SessionId) => Effect.Effect<boolean>) | undefined
  /** Milliseconds a stop waits to write the records still queued (BRAIN_CLEANUP_DEADLINE_MS); 0: no bound. */
  readonly cleanupDeadlineMs?: number | undefined
}

interface Connection {
  readonly id: number
  readonly body: CommandStreamBody
}

interface InFlight {
  readonly connection: number
  readonly environment: string
  /** The call's answer once it has one (`answerCall`). */
  answered: Exit.Exit<CallAnswer, EnvironmentUncertain> | undefined
  /** The waiting caller's callback, while it waits. */
  resume: ((answer: Exit.Exit<CallAnswer, EnvironmentUncertain>) => void) | undefined
  /** Done when the host confirms a cancel (`{"stopped": true}`); made when the cancel is sent. */
  stopped: Deferred.Deferred<void> | undefined
  cancelSent: boolean
  readonly emit: EnvironmentCall["emit"]
  /**
   * Events and the result, one at a time; made by the call's first Event (most calls post none,
   * and a result for a call without one takes no lock: nothing can be in flight before it).
   */
  lock: Effect.Semaphore | undefined
}

/** Answers a call in flight, once: its waiting caller now, or the caller that comes to wait. */
const answerCall = (pending: InFlight, answer: Exit.Exit<CallAnswer, EnvironmentUncertain>) => {
  if (pending.answered !== undefined) return
  pending.answered = answer
  const resume = pending.resume
  pending.resume = undefined
  resume?.(answer)
}

interface Host {
  readonly id: HostId
  readonly digest: Buffer
  connection: Connection | undefined
  readonly calls: Map<string, InFlight>
  /** Since when it has had no stream (meaningful while `connection` is undefined). */
  idleSinceMs: number
  /** Sessions recorded as naming it, not known to be deleted. */
  readonly sessions: Set<SessionId>
  /** False for a registration from a server that did not record sessions: it never expires by itself. */
  readonly sessionsRecorded: boolean
}

const sha256 = (s: string) => crypto.createHash("sha256").update(s).digest()
const keyOf = (call: CallName) => `${call.session}/${call.sequence}`
/** Compared against when the host is unknown, so that an unknown id costs the same as a wrong token. */
const NOBODY = sha256("")

/**
 * A tool-origin Event the session refused, as the host's answer: a reserved kind is the request's
 * fault (400) and the turn's byte budget its size (413), both saying which in `details.reason`;
 * the session's storage refusals keep their code. The session answers nothing else here.
 */
const eventRefused = (f: Failure): HostEventError => {
  switch (f.code) {
    case "reserved_kind":
      return new InvalidRequest({ message: f.message, details: { reason: f.code } })
    case "emitted_bytes_limit":
      return new PayloadTooLarge({ message: f.message, details: { reason: f.code } })
    case "conflict":
      return new Conflict({ message: f.message, retryable: f.retryable })
    case "invalid_request":
      return new InvalidRequest({ message: f.message, retryable: f.retryable })
    case "not_found":
      return new NotFound({ message: f.message, retryable: f.retryable })
    case "journal_corrupt":
      return new JournalCorrupt({ message: f.message, retryable: f.retryable, ...(f.details !== undefined ? { details: f.details } : {}) })
    case "journal_write_failed":
      return new JournalWriteFailed({ message: f.message, retryable: f.retryable })
    case "overloaded":
      return new Overloaded({ message: f.message, retryable: f.retryable })
    default:
      return new Internal({ message: `${f.code}: ${f.message}`, retryable: f.retryable })
  }
}

/** Lines past what the standing registrations need before the file is rewritten at start. */
const SPARE_LINES = 64

/** How often the expiry sweep runs: a tenth of the expiry, within HOST_EXPIRY_SWEEP_MIN_MS and HOST_EXPIRY_SWEEP_MS. */
export const sweepEveryMs = (expiryMs: number) => Math.min(HOST_EXPIRY_SWEEP_MS, Math.max(HOST_EXPIRY_SWEEP_MIN_MS, Math.ceil(expiryMs / 10)))

const failedWrite = (what: string) => (e: unknown) => new Internal({ message: `${what} could not be stored: ${(e as NodeJS.ErrnoException).code ?? "error"}` })

export const make = (options: HostsOptions): Effect.Effect<HostsShape, never, Scope.Scope> =>
  Effect.gen(function*() {
    const clock = yield* Effect.clock
    const expiryMs = options.idleExpiryMs ?? 0
    const hosts = new Map<string, Host>()
    const file = options.dataDir !== undefined ? registrationsFile(options.dataDir) : undefined
    if (file !== undefined) {
      const { lines, standing } = yield* readRegistrations(file)
      const startedAt = clock.unsafeCurrentTimeMillis()
      // A host whose stream was open when the server stopped, or whose close was never written,
      // counts as connected until now; recorded, so that the next start does not move it again.
      const settled: Array<string> = []
      for (const [id, r] of standing) {
        const since = idleSince(r)
        if (since === undefined) {
          r.idleSinceMs = startedAt
          settled.push(idleLine(id, startedAt))
        }
        hosts.set(id, {
          id,
          digest: r.digest,
          connection: undefined,
          calls: new Map(),
          idleSinceMs: since ?? startedAt,
          sessions: new Set(r.sessions.keys()),
          sessionsRecorded: r.sessionsRecorded
        })
      }
      const compacted = [...standing.values()].flatMap(linesOf)
      // Only a start rewrites: nothing appends meanwhile. A failure keeps the old file, which reads
      // the same but for what `settled` adds (appended instead).
      const rewritten = lines > compacted.length + SPARE_LINES &&
        (yield* Effect.tryPromise(() => rewriteDurably(file, compacted)).pipe(
          Effect.as(true),
          Effect.catchAll((e) => Effect.as(Effect.logWarning(`the host registrations file was not compacted: ${String(e.error)}`), false))
        ))
      if (!rewritten && settled.length > 0) {
        // Not written, the next start counts these hosts as connected until then: later, never sooner.
        yield* Effect.tryPromise(() => appendDurably(file, settled)).pipe(
          Effect.catchAll((e) => Effect.logWarning(`the host registrations' idle times were not recorded: ${String(e.error)}`))
        )
      }
    }
    const appends = yield* Effect.makeSemaphore(1)
    /** Appends `lines` durably, one writer at a time; nothing to do without a file. */
    const append = (lines: ReadonlyArray<string>, what: string) =>
      file === undefined ? Effect.void : appends.withPermits(1)(Effect.tryPromise({ try: () => appendDurably(file, lines), catch: failedWrite(what) }))
    // Records nothing waits for (a stream's close, a deleted session's release), written in the
    // background in batches. One dropped (the queue full) or lost makes the file say less, never
    // something false: see HOST_RECORDS_QUEUE.
    const records = yield* Queue.dropping<string>(HOST_RECORDS_QUEUE)
    const record = (line: string) => {
      if (file !== undefined) Queue.unsafeOffer(records, line)
    }
    const writeRecords = (lines: ReadonlyArray<string>) =>
      lines.length === 0 ? Effect.void : Effect.catchAll(append(lines, "the host records"), (e) => Effect.logWarning(e.message))
    yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.takeBetween(records, 1, HOST_RECORDS_QUEUE), (c) => writeRecords(Chunk.toReadonlyArray(c)))))
    let connections = 0

    const name = (host: string) => `host ${JSON.stringify(host)}`

    /** The stream `connection` of `host` is over: its calls in flight may have run. */
    const gone = (host: Host, connection: number) => {
      if (host.connection?.id === connection) {
        // Not replaced by a newer stream: the host is idle from now.
        host.connection = undefined
        host.idleSinceMs = clock.unsafeCurrentTimeMillis()
        record(idleLine(host.id, host.idleSinceMs))
      }
      for (const [key, call] of host.calls) {
        if (call.connection !== connection) continue
        host.calls.delete(key)
        answerCall(
          call,
          Exit.fail(
            new EnvironmentUncertain({
              environment: call.environment,
              reason: "connection_lost",
              message: `the command stream of ${name(host.id)} was closed while the call was in flight; it may have run`
            })
          )
        )
      }
    }

    /** Removes `host`'s registration, durably first: its stream ends (its calls in flight become uncertain, `gone`). */
    const remove = (host: Host, by: RemovedBy) =>
      Effect.gen(function*() {
        yield* append([removalLine(host.id, clock.unsafeCurrentTimeMillis(), by)], "the removal")
        hosts.delete(host.id)
        host.connection?.body.close()
      })

    /** Whether `host` has been idle past the expiry at `now`, with nothing that could still need it. */
    const expired = (host: Host, now: number) =>
      expiryMs > 0 && host.sessionsRecorded && host.connection === undefined && host.sessions.size === 0 &&
      hosts.get(host.id) === host && now - host.idleSinceMs >= expiryMs

    const expire: HostsShape["expire"] = Effect.gen(function*() {
      if (expiryMs === 0) return []
      const now = yield* Clock.currentTimeMillis
      const removed: Array<HostId> = []
      for (const host of [...hosts.values()]) {
        if (!host.sessionsRecorded || host.connection !== undefined || now - host.idleSinceMs < expiryMs) continue
        // A naming whose session is gone (deleted with its release lost, or a create cut off) holds
        // nothing. One session that exists holds the host: the rest wait for a later sweep.
        if (options.sessionExists !== undefined) {
          for (const session of [...host.sessions]) {
            if (yield* options.sessionExists(session)) break
            host.sessions.delete(session)
            record(releasedLine(host.id, session, now))
          }
        }
        if (!expired(host, now)) continue
        // Checked again with the appends held: a stream or a session that came meanwhile keeps it.
        const done = yield* appends.withPermits(1)(Effect.suspend(() => {
          if (!expired(host, now)) return Effect.succeed(false)
          const durable = file === undefined
            ? Effect.void
            : Effect.tryPromise({ try: () => appendDurably(file, [removalLine(host.id, now, "expiry")]), catch: failedWrite("the expiry") })
          return Effect.as(Effect.tap(durable, () => Effect.sync(() => hosts.delete(host.id))), true)
        })).pipe(Effect.catchAll((e) => Effect.as(Effect.logWarning(`${name(host.id)} was not expired: ${e.message}`), false)))
        if (done) removed.push(host.id)
      }
      if (removed.length > 0) yield* Effect.logInfo(`expired ${removed.length} host registration(s) idle for ${expiryMs / 1000} s (BRAIN_HOST_IDLE_EXPIRY_SECS)`)
      return removed
    })

    /** The refusal at MAX_HOSTS: what frees room, and whether waiting will (an idle registration nothing needs expires). */
    const full = (now: number) => {
      let next: number | undefined
      if (expiryMs > 0) {
        for (const host of hosts.values()) {
          if (!host.sessionsRecorded || host.connection !== undefined || host.sessions.size > 0) continue
          const due = host.idleSinceMs + expiryMs
          if (next === undefined || due < next) next = due
        }
      }
      const frees = `a registration is removed by its host (DELETE /v1/hosts/{id}), by an operator (\`brain hosts remove\`, the server stopped)` +
        (expiryMs > 0
          ? `, or by itself once it has had no command stream and no session naming it for ${expiryMs / 1000} s (BRAIN_HOST_IDLE_EXPIRY_SECS)`
          : " (registrations do not expire: BRAIN_HOST_IDLE_EXPIRY_SECS is 0)")
      const wait = next === undefined
        ? expiryMs > 0 ? "; none will expire by itself now: each is connected, named by a session that is not deleted, or registered by an older server that did not record its sessions" : ""
        : `; the next expires in ${Math.ceil(Math.max(0, next - now) / 1000)} s`
      return new Overloaded({
        message: `this server holds ${MAX_HOSTS} host registrations, its most (MAX_HOSTS): ${frees}${wait}`,
        retryable: next !== undefined,
        details: next === undefined ? { reason: "max_hosts" } : { reason: "max_hosts", retry_after_ms: Math.max(0, next - now) }
      })
    }

    const register: HostsShape["register"] = Effect.gen(function*() {
      // At the bound, what is due goes first (the sweep may not have come yet).
      if (hosts.size >= MAX_HOSTS) yield* expire
      if (hosts.size >= MAX_HOSTS) return yield* Effect.fail(full(clock.unsafeCurrentTimeMillis()))
      const host_id = yield* mintHostId
      const token = `bht_${crypto.randomBytes(HOST_TOKEN_BYTES).toString("base64url")}`
      const digest = sha256(token)
      const now = clock.unsafeCurrentTimeMillis()
      yield* append([registrationLine(host_id, digest, now)], "the registration")
      hosts.set(host_id, { id: host_id, digest, connection: undefined, calls: new Map(), idleSinceMs: now, sessions: new Set(), sessionsRecorded: true })
      return { host_id, token }
    })

    const unregister: HostsShape["unregister"] = (id) =>
      Effect.suspend(() => {
        const host = hosts.get(id)
        return host === undefined ? Effect.void : remove(host, "host")
      })

    const use: HostsShape["use"] = (id, session) =>
      appends.withPermits(1)(Effect.suspend((): Effect.Effect<void, InvalidRequest | Internal> => {
        const host = hosts.get(id)
        if (host === undefined) {
          return Effect.fail(new InvalidRequest({ message: `no host is registered with id ${JSON.stringify(id)} (POST /v1/hosts)` }))
        }
        if (host.sessions.has(session)) return Effect.void
        // Held from now: a sweep waiting for the appends sees it.
        host.sessions.add(session)
        if (file === undefined) return Effect.void
        return Effect.tryPromise({
          try: () => appendDurably(file, [namedLine(id, session, clock.unsafeCurrentTimeMillis())]),
          catch: failedWrite("the session's naming of its host")
        }).pipe(Effect.tapError(() => Effect.sync(() => host.sessions.delete(session))))
      }))

    const release: HostsShape["release"] = (id, session) =>
      Effect.sync(() => {
        const host = hosts.get(id)
        if (host?.sessions.delete(session)) record(releasedLine(id, session, clock.unsafeCurrentTimeMillis()))
      })

    const authorize: HostsShape["authorize"] = (host, token) => {
      const known = hosts.get(host)
      const same = crypto.timingSafeEqual(sha256(token), known?.digest ?? NOBODY)
      return known !== undefined && same
    }

    const connect: HostsShape["connect"] = (id) =>
      appends.withPermits(1)(Effect.gen(function*() {
        const host = hosts.get(id)
        // Removed since its token was checked.
        if (host === undefined) return yield* Effect.fail(new Unauthorized({ message: `${name(id)} is not registered` }))
        if (file !== undefined) {
          yield* Effect.tryPromise({ try: () => appendDurably(file, [connectedLine(id, clock.unsafeCurrentTimeMillis())]), catch: failedWrite("the stream's opening") })
        }
        const previous = host.connection
        const connection = ++connections
        const body = new CommandStreamBody({ commands: HOST_COMMAND_QUEUE, heartbeatMs: options.heartbeatMs }, () => gone(host, connection))
        // The new stream is the host's before the old one is over: the host is never idle between
        // them. The old one's calls become uncertain and never reach the new one (they are its own).
        host.connection = { id: connection, body }
        previous?.body.close()
        // The heartbeat interval lets the host tell a silent stream from a quiet one (0: no heartbeats).
        body.offer(frame("ready", { host_id: id, heartbeat_ms: options.heartbeatMs }))
        return { body, stop: Effect.sync(() => body.close()) }
      }))

    /** A refusal's details; in a batch they also name the result (`index`). */
    const detailsOf = (details: Record<string, unknown>, index: number | undefined) => (index === undefined ? details : { ...details, index })

    const notInFlight = (call: CallName, index?: number) =>
      new Conflict({
        message: `no call ${call.session}/${call.sequence} is in flight on this host: it never came, it has ended, or its stream was closed`,
        details: detailsOf({ reason: "not_in_flight" }, index)
      })

    const inFlight = (id: HostId, call: CallName) => {
      const found = hosts.get(id)?.calls.get(keyOf(call))
      return found !== undefined ? Effect.succeed(found) : Effect.fail(notInFlight(call))
    }

    /** Whether `pending` is still in flight (not settled by another request meanwhile). */
    const still = (id: HostId, call: CallName, pending: InFlight) => hosts.get(id)?.calls.get(keyOf(call)) === pending

    /** Why `answer` cannot settle `pending`, or undefined when it can. */
    const refusal = (pending: InFlight, answer: HostAnswer, index: number | undefined): Conflict | PayloadTooLarge | undefined => {
      if ("stopped" in answer) {
        return pending.cancelSent
          ? undefined
          : new Conflict({
            message: "no cancel was sent for this call: answer it with ok or error",
            details: detailsOf({ reason: "not_cancelled" }, index)
          })
      }
      const value = "ok" in answer ? answer.ok : answer.error
      const bytes = Buffer.byteLength(JSON.stringify(value ?? null), "utf8")
      return bytes > options.maxResultBytes
        ? new PayloadTooLarge({
          message: `the result's value is ${bytes} bytes, more than ${options.maxResultBytes} (BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES); the call is still in flight`,
          ...(index === undefined ? {} : { details: { index } })
        })
        : undefined
    }

    /**
     * Settles calls in flight on `host`, all or none: each result is checked first (in flight on
     * this host, named once, `stopped` only after a cancel, its value within bounds), then every
     * call's lock is taken (in one order, so two batches never wait on each other), each is checked
     * again, and only then are they all settled, in one step. A refusal changes nothing.
     */
    const settle = (id: HostId, items: ReadonlyArray<{ readonly call: CallName; readonly answer: HostAnswer }>, batch: boolean) =>
      Effect.suspend((): Effect.Effect<void, ResultError | InvalidRequest> => {
        const named = new Set<string>()
        const checked: Array<{ readonly key: string; readonly index: number; readonly call: CallName; readonly answer: HostAnswer; readonly pending: InFlight }> = []
        for (let i = 0; i < items.length; i++) {
          const { answer, call } = items[i]
          const index = batch ? i : undefined
          const key = keyOf(call)
          if (named.has(key)) {
            return Effect.fail(new InvalidRequest({ message: `the batch names the call ${key} more than once`, details: { index: i } }))
          }
          named.add(key)
          const pending = hosts.get(id)?.calls.get(key)
          if (pending === undefined) return Effect.fail(notInFlight(call, index))
          const refused = refusal(pending, answer, index)
          if (refused !== undefined) return Effect.fail(refused)
          checked.push({ key, index: i, call, answer, pending })
        }
        // The locks of the calls that have posted Events: an Event in flight is committed first.
        const ordered = checked.filter((c) => c.pending.lock !== undefined).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
        const held = new Set(ordered.map((c) => c.pending.lock))
        /** Settles the calls once their locks are held; false (nothing settled) when a call posted its first Event meanwhile. */
        const take = Effect.suspend((): Effect.Effect<boolean, Conflict> => {
          if (checked.some((c) => c.pending.lock !== undefined && !held.has(c.pending.lock))) return Effect.succeed(false)
          // Settled meanwhile (another result, or the stream closed): nothing is taken.
          const gone = checked.findIndex((c) => !still(id, c.call, c.pending))
          if (gone >= 0) return Effect.fail(notInFlight(checked[gone].call, batch ? checked[gone].index : undefined))
          const calls = hosts.get(id)!.calls
          for (const { answer, key, pending } of checked) {
            calls.delete(key)
            if ("stopped" in answer) Deferred.unsafeDone(pending.stopped!, Exit.void)
            else answerCall(pending, Exit.succeed<CallAnswer>("ok" in answer ? { outcome: "ok", output: answer.ok } : { outcome: "error", output: answer.error }))
          }
          return Effect.succeed(true)
        })
        const locked = ordered.reduceRight<Effect.Effect<boolean, Conflict>>((inner, c) => c.pending.lock!.withPermits(1)(inner), take)
        // A call that posted its first Event while this waited: again, with its lock too (locks are only ever made, so this ends).
        return Effect.flatMap(locked, (settled) => (settled ? Effect.void : settle(id, items, batch)))
      })

    // One result names one call: never twice.
    const result: HostsShape["result"] = (id, call, answer) => Effect.catchTag(settle(id, [{ call, answer }], false), "InvalidRequest", Effect.die)
    const results: HostsShape["results"] = (id, items) => settle(id, items, true)

    const event: HostsShape["event"] = (id, call, kind, payload) =>
      Effect.gen(function*() {
        const pending = yield* inFlight(id, call)
        const lock = (pending.lock ??= Effect.unsafeMakeSemaphore(1))
        return yield* lock.withPermits(1)(Effect.gen(function*() {
          if (!still(id, call, pending)) return yield* Effect.fail(notInFlight(call))
          if (pending.emit === undefined) {
            return yield* Effect.fail(new Conflict({ message: "this call takes no Events" }))
          }
          return yield* pending.emit(kind, payload).pipe(Effect.mapError(({ failure: f }) => eventRefused(f)))
        }))
      })

    const send: HostsShape["send"] = (id, request) => {
      const environment = request.environment.name
      const notSent = (reason: EnvironmentNotSent["reason"], why: string) =>
        new EnvironmentNotSent({ environment, reason, message: `Environment ${JSON.stringify(environment)}: ${why}; nothing was sent` })
      const host = hosts.get(id)
      if (host === undefined) return notSent("host_unknown", `${name(id)} is not registered`)
      const connection = host.connection
      if (connection === undefined) return notSent("host_disconnected", `${name(id)} has no open command stream`)
      const key = keyOf(request)
      const pending: InFlight = {
        connection: connection.id,
        environment,
        answered: undefined,
        resume: undefined,
        stopped: undefined,
        cancelSent: false,
        emit: request.emit,
        lock: undefined
      }
      host.calls.set(key, pending)
      const sent = connection.body.offer(frame("call", {
        session_id: request.session,
        sequence: request.sequence,
        environment,
        name: request.name,
        call_id: request.callId,
        input: request.input,
        deadline_at_ms: request.deadlineAtMs
      }))
      if (!sent) {
        host.calls.delete(key)
        return notSent("host_busy", `${name(id)} has ${HOST_COMMAND_QUEUE} commands waiting to be read (HOST_COMMAND_QUEUE)`)
      }
      // One callback, not a Deferred and a finalizer: a caller that stops waiting takes the call
      // out of the host's calls (an answered one is out already).
      return {
        await: (f) => {
          if (pending.answered !== undefined) f(pending.answered)
          else pending.resume = f
        },
        abandon: () => {
          pending.resume = undefined
          if (host.calls.get(key) === pending) host.calls.delete(key)
        }
      }
    }

    const call: HostsShape["call"] = (id, request) =>
      Effect.suspend((): Effect.Effect<CallAnswer, EnvironmentNotSent | EnvironmentUncertain> => {
        const sent = send(id, request)
        if (sent instanceof EnvironmentNotSent) return Effect.fail(sent)
        return waitFor<CallAnswer, EnvironmentUncertain>((resume) => {
          sent.await(resume)
          return sent.abandon
        })
      })

    const cancel: HostsShape["cancel"] = (id, request) =>
      Effect.suspend((): Effect.Effect<CancelAnswer> => {
        const unconfirmed = (why: string) => Effect.succeed<CancelAnswer>({ confirmed: false, why })
        const host = hosts.get(id)
        const pending = host?.calls.get(keyOf(request))
        if (host === undefined || pending === undefined) return unconfirmed(`the call is not in flight on ${name(id)}`)
        const connection = host.connection
        if (connection === undefined || connection.id !== pending.connection) return unconfirmed(`the command stream of ${name(id)} was closed`)
        if (!connection.body.offer(frame("cancel", { session_id: request.session, sequence: request.sequence, reason: request.reason }))) {
          return unconfirmed(`${name(id)} has ${HOST_COMMAND_QUEUE} commands waiting to be read: the cancel was not sent`)
        }
        const stopped = (pending.stopped ??= Deferred.unsafeMake(FiberId.none))
        pending.cancelSent = true
        return Deferred.await(stopped).pipe(
          Effect.as<CancelAnswer>({ confirmed: true }),
          Effect.timeoutTo({
            duration: Duration.millis(options.graceMs),
            onSuccess: (a) => a,
            onTimeout: (): CancelAnswer => ({ confirmed: false, why: `${name(id)} did not confirm the cancel within ${options.graceMs} ms (BRAIN_CANCEL_GRACE_MS)` })
          })
        )
      })

    const stopAll: HostsShape["stopAll"] = Effect.sync(() => {
      for (const host of hosts.values()) host.connection?.body.close()
    })

    if (expiryMs > 0) {
      yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sleep(Duration.millis(sweepEveryMs(expiryMs))), expire)))
    }
    // Closing: every stream ends (their hosts idle from now), then what is queued is written,
    // within the cleanup deadline. Added last, so run first.
    const deadline = options.cleanupDeadlineMs ?? 0
    yield* Effect.addFinalizer(() =>
      Effect.zipRight(
        stopAll,
        Effect.interruptible(Effect.flatMap(Queue.takeAll(records), (c) => writeRecords(Chunk.toReadonlyArray(c)))).pipe(
          (flush) => (deadline > 0 ? Effect.asVoid(Effect.timeoutOption(flush, Duration.millis(deadline))) : flush)
        )
      )
    )

    return {
      register,
      unregister,
      isRegistered: (host) => hosts.has(host),
      use,
      release,
      expire,
      authorize,
      connect,
      result,
      results,
      event,
      send,
      call,
      cancel,
      stopAll
    } satisfies HostsShape
  })

/**
 * The registry as a layer: closing it ends every command stream, as a server's stop does. A
 * naming's session is looked up in the journal, when the layer is given one.
 */
export const layer = (options: HostsOptions): Layer.Layer<Hosts> =>
  Layer.scoped(
    Hosts,
    Effect.flatMap(Effect.serviceOption(Journal), (journal) =>
      make({ ...options, sessionExists: options.sessionExists ?? Option.getOrUndefined(Option.map(journal, (j) => j.exists)) }))
  )

/** The registry over the server's data directory, settings and journal, as main.ts wires it. */
export const layerConfigured: Layer.Layer<Hosts, never, ServerConfig | Journal> = Layer.scoped(
  Hosts,
  Effect.gen(function*() {
    const config = yield* ServerConfig
    const journal = yield* Journal
    return yield* make({
      dataDir: path.resolve(config.dataDir),
      graceMs: config.cancelGraceMs,
      heartbeatMs: config.sseHeartbeatMs,
      maxResultBytes: config.maxEnvironmentResponseBytes,
      idleExpiryMs: config.hostIdleExpiryMs,
      sessionExists: journal.exists,
      cleanupDeadlineMs: config.cleanupDeadlineMs
    })
  })
)
