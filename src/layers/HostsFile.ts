/**
 * The host registry (services/Hosts.ts; docs/environments.md, "The `host` driver").
 *
 * - Registrations: one JSON line each in `{dataDir}/hosts/registrations.jsonl` (hosts/Registrations.ts
 *   has the lines), appended and fsynced before `register` answers, read back at start (a torn
 *   last line — a registration that never answered — is ignored). The token itself is never
 *   stored. At most MAX_HOSTS at once. A removal (by the host, the idle expiry or an operator) is a
 *   line fsynced before it counts, and the registration is gone for good. At start, a file with
 *   more lines than it needs is rewritten with only what stands (a new file, synced, then renamed
 *   over the old), and while the server runs once it has doubled since its last rewrite (hosts/Compaction.ts).
 * - Idle expiry: a registration that has had no command stream for `idleExpiryMs` and that no
 *   existing session names is removed. It is gone from the moment it is due, not from the next
 *   sweep: its token authorizes nothing, and its stream and a session naming it are refused (and
 *   remove it, durably), and a start sweeps before it answers anything. The clock is on file: a stream's opening is fsynced before
 *   its `ready` frame, its close appended after (`idle_since_ms`). A host whose stream was open when
 *   the server stopped (or whose close was not written) counts as connected until this start,
 *   which is recorded, so a restart moves its clock once and never again. A session's naming is
 *   fsynced before the session's first record (`use`) and released when it is deleted; a sweep
 *   drops a naming whose session no longer exists (a release lost in a crash, a create cut off).
 * - At most MAX_HOSTS registrations, counting those whose line is still being written: a
 *   registration takes its place before its write and gives it back if the write fails.
 * - Connections: a host has at most one command stream; a new one replaces it. Its calls in flight
 *   belong to the stream they were offered to (hosts/Calls.ts): when that stream is over they fail
 *   and are forgotten, `EnvironmentNotSent` `host_disconnected` those whose frame still waited in
 *   its queue (never written), `EnvironmentUncertain` `connection_lost` the others.
 *
 * The in-memory host is hosts/Host.ts, what a start reads back hosts/Restore.ts, the calls in
 * flight hosts/Calls.ts, a command stream hosts/CommandStream.ts.
 */
import * as crypto from "node:crypto"
import * as path from "node:path"
import { Chunk, Clock, Duration, Effect, Exit, Layer, Option, Queue, type Scope } from "effect"
import { Internal, InvalidRequest, Overloaded, Unauthorized } from "../domain/Errors.js"
import { type HostId, mintHostId, type SessionId } from "../domain/Ids.js"
import {
  HOST_COMMAND_QUEUE,
  HOST_EXPIRY_SWEEP_MIN_MS,
  HOST_EXPIRY_SWEEP_MS,
  HOST_RECORDS_QUEUE,
  HOST_TOKEN_BYTES,
  MAX_HOSTS
} from "../domain/Limits.js"
import { Hosts, type HostsShape } from "../services/Hosts.js"
import { Journal } from "../services/Journal.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { loseCalls, makeCalls } from "./hosts/Calls.js"
import { CommandStreamBody } from "./hosts/CommandStream.js"
import { makeCompaction } from "./hosts/Compaction.js"
import { type Host, hostName } from "./hosts/Host.js"
import {
  appendDurably,
  connectedLine,
  idleLine,
  namedLine,
  registrationLine,
  registrationsFile,
  type RegistrationsUnreadable,
  releasedLine,
  removalLine,
  type RemovedBy
} from "./hosts/Registrations.js"
import { restoreHosts } from "./hosts/Restore.js"
import type { TakenBounds } from "./hosts/Taken.js"
import { namedFrame as frame } from "./sessions/SseFrames.js"

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
  /** How many results taken from hosts are remembered, and how long (HOST_TAKEN_RESULTS, HOST_TAKEN_RESULT_MS when undefined: tests set less). */
  readonly takenResults?: TakenBounds | undefined
}

const sha256 = (s: string) => crypto.createHash("sha256").update(s).digest()
/** Compared against when the host is unknown, so that an unknown id costs the same as a wrong token. */
const NOBODY = sha256("")

/** How often the expiry sweep runs: a tenth of the expiry, within HOST_EXPIRY_SWEEP_MIN_MS and HOST_EXPIRY_SWEEP_MS. */
export const sweepEveryMs = (expiryMs: number) => Math.min(HOST_EXPIRY_SWEEP_MS, Math.max(HOST_EXPIRY_SWEEP_MIN_MS, Math.ceil(expiryMs / 10)))

const failedWrite = (what: string) => (e: unknown) => new Internal({ message: `${what} could not be stored: ${(e as NodeJS.ErrnoException).code ?? "error"}` })

export const make = (options: HostsOptions): Effect.Effect<HostsShape, RegistrationsUnreadable, Scope.Scope> =>
  Effect.gen(function*() {
    const clock = yield* Effect.clock
    const expiryMs = options.idleExpiryMs ?? 0
    const file = options.dataDir !== undefined ? registrationsFile(options.dataDir) : undefined
    const hosts = file !== undefined ? yield* restoreHosts(file, clock) : new Map<string, Host>()
    const appends = yield* Effect.makeSemaphore(1)
    // Run holding the appends after those a host or a session can repeat at will (hosts/Compaction.ts).
    const compactIfGrown = file === undefined ? Effect.void : makeCompaction(file).ifGrown
    /** Appends `lines` durably, one writer at a time; nothing to do without a file. */
    const append = (lines: ReadonlyArray<string>, what: string) =>
      file === undefined
        ? Effect.void
        : appends.withPermits(1)(Effect.zipRight(Effect.tryPromise({ try: () => appendDurably(file, lines), catch: failedWrite(what) }), compactIfGrown))
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

    /** The stream `connection` of `host` is over: its calls in flight may have run. */
    const gone = (host: Host, connection: number) => {
      if (host.connection?.id === connection) {
        // Not replaced by a newer stream: the host is idle from now.
        host.connection = undefined
        host.idleSinceMs = clock.unsafeCurrentTimeMillis()
        record(idleLine(host.id, host.idleSinceMs))
      }
      loseCalls(host, connection)
    }

    /** Removes `host`'s registration, durably first: its stream ends (its calls in flight become uncertain, `gone`). */
    const remove = (host: Host, by: RemovedBy) =>
      Effect.gen(function*() {
        yield* append([removalLine(host.id, clock.unsafeCurrentTimeMillis(), by)], "the removal")
        hosts.delete(host.id)
        host.connection?.body.close()
      })

    /**
     * Whether `host` has been idle past the expiry at `now`, with nothing that could still need it:
     * gone from then, whether or not a sweep has removed it yet.
     */
    const expired = (host: Host, now: number) =>
      expiryMs > 0 && host.sessionsRecorded && host.connection === undefined && host.sessions.size === 0 &&
      hosts.get(host.id) === host && now - host.idleSinceMs >= expiryMs

    /** `id`'s registration unless it is missing or due (`expired`). */
    const standing = (id: string): Host | undefined => {
      const host = hosts.get(id)
      return host === undefined || expired(host, clock.unsafeCurrentTimeMillis()) ? undefined : host
    }

    /**
     * Removes `id`'s registration now if it is due, durably (the caller holds the appends): found
     * due by a use rather than a sweep. A failed write is logged; the registration stays gone
     * all the same (`standing`), and a later use or sweep writes its removal.
     */
    const removeIfDue = (id: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        const host = hosts.get(id)
        const now = clock.unsafeCurrentTimeMillis()
        if (host === undefined || !expired(host, now)) return Effect.void
        const durable = file === undefined
          ? Effect.void
          : Effect.tryPromise({ try: () => appendDurably(file, [removalLine(host.id, now, "expiry")]), catch: failedWrite("the expiry") })
        return Effect.tap(durable, () => Effect.sync(() => hosts.delete(host.id))).pipe(
          Effect.catchAll((e) => Effect.logWarning(`${hostName(host.id)} was not expired: ${e.message}`))
        )
      })

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
        })).pipe(Effect.catchAll((e) => Effect.as(Effect.logWarning(`${hostName(host.id)} was not expired: ${e.message}`), false)))
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

    /** Registrations whose line is being written: each holds its place under MAX_HOSTS meanwhile. */
    let writing = 0
    const register: HostsShape["register"] = Effect.gen(function*() {
      // At the bound, what is due goes first (the sweep may not have come yet).
      if (hosts.size + writing >= MAX_HOSTS) yield* expire
      // Checked and taken in one step: concurrent registrations cannot all pass the check.
      if (hosts.size + writing >= MAX_HOSTS) return yield* Effect.fail(full(clock.unsafeCurrentTimeMillis()))
      writing++
      const host_id = yield* mintHostId
      const token = `bht_${crypto.randomBytes(HOST_TOKEN_BYTES).toString("base64url")}`
      const digest = sha256(token)
      const now = clock.unsafeCurrentTimeMillis()
      // The place goes to the host once its line is durable, or back if the write failed.
      yield* Effect.onExit(append([registrationLine(host_id, digest, now)], "the registration"), (exit) =>
        Effect.sync(() => {
          writing--
          if (Exit.isSuccess(exit)) {
            hosts.set(host_id, { id: host_id, digest, connection: undefined, calls: new Map(), idleSinceMs: now, sessions: new Set(), sessionsRecorded: true })
          }
        }))
      return { host_id, token }
    })

    const unregister: HostsShape["unregister"] = (id) =>
      Effect.suspend(() => {
        const host = hosts.get(id)
        return host === undefined ? Effect.void : remove(host, "host")
      })

    const use: HostsShape["use"] = (id, session) =>
      appends.withPermits(1)(Effect.suspend((): Effect.Effect<void, InvalidRequest | Internal> => {
        const host = standing(id)
        if (host === undefined) {
          return Effect.zipRight(
            removeIfDue(id),
            Effect.fail(new InvalidRequest({ message: `no host is registered with id ${JSON.stringify(id)} (POST /v1/hosts)` }))
          )
        }
        if (host.sessions.has(session)) return Effect.void
        // Held from now: a sweep waiting for the appends sees it.
        host.sessions.add(session)
        if (file === undefined) return Effect.void
        return Effect.tryPromise({
          try: () => appendDurably(file, [namedLine(id, session, clock.unsafeCurrentTimeMillis())]),
          catch: failedWrite("the session's naming of its host")
        }).pipe(Effect.tapError(() => Effect.sync(() => host.sessions.delete(session))), Effect.zipRight(compactIfGrown))
      }))

    const release: HostsShape["release"] = (id, session) =>
      Effect.sync(() => {
        const host = hosts.get(id)
        if (host?.sessions.delete(session)) record(releasedLine(id, session, clock.unsafeCurrentTimeMillis()))
      })

    const authorize: HostsShape["authorize"] = (host, token) => {
      const known = standing(host)
      const same = crypto.timingSafeEqual(sha256(token), known?.digest ?? NOBODY)
      return known !== undefined && same
    }

    const connect: HostsShape["connect"] = (id) =>
      appends.withPermits(1)(Effect.gen(function*() {
        const host = standing(id)
        // Removed (or come due) since its token was checked.
        if (host === undefined) {
          yield* removeIfDue(id)
          return yield* Effect.fail(new Unauthorized({ message: `${hostName(id)} is not registered` }))
        }
        if (file !== undefined) {
          yield* Effect.tryPromise({ try: () => appendDurably(file, [connectedLine(id, clock.unsafeCurrentTimeMillis())]), catch: failedWrite("the stream's opening") })
          yield* compactIfGrown
        }
        const previous = host.connection
        const connection = ++connections
        const body = new CommandStreamBody({ commands: HOST_COMMAND_QUEUE, heartbeatMs: options.heartbeatMs }, () => gone(host, connection))
        // The new stream is the host's before the old one is over: the host is never idle between
        // them. The old one's calls end (not sent if still queued on it, else uncertain) and never
        // reach the new one (they are its own).
        host.connection = { id: connection, body }
        previous?.body.close()
        // The heartbeat interval lets the host tell a silent stream from a quiet one (0: no heartbeats).
        body.offer(frame("ready", { host_id: id, heartbeat_ms: options.heartbeatMs }))
        return { body, stop: Effect.sync(() => body.close()) }
      }))

    const { call, cancel, event, result, results, send } = makeCalls(hosts, { ...options, now: () => clock.unsafeCurrentTimeMillis() })

    const stopAll: HostsShape["stopAll"] = Effect.sync(() => {
      for (const host of hosts.values()) host.connection?.body.close()
    })

    if (expiryMs > 0) {
      // What came due while the server was down goes before anything is answered: a restart never
      // makes an idle registration look fresh.
      yield* expire
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
      isRegistered: (host) => standing(host) !== undefined,
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
export const layer = (options: HostsOptions): Layer.Layer<Hosts, RegistrationsUnreadable> =>
  Layer.scoped(
    Hosts,
    Effect.flatMap(Effect.serviceOption(Journal), (journal) =>
      make({ ...options, sessionExists: options.sessionExists ?? Option.getOrUndefined(Option.map(journal, (j) => j.exists)) }))
  )

/** The registry over the server's data directory, settings and journal, as main.ts wires it. */
export const layerConfigured: Layer.Layer<Hosts, RegistrationsUnreadable, ServerConfig | Journal> = Layer.scoped(
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
