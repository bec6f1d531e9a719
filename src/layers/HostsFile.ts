/**
 * The host registry (services/Hosts.ts; docs/environments.md, "The `host` driver").
 *
 * - Registrations: `{host_id, token_sha256, registered_at_ms}`, one JSON line each in
 *   `{dataDir}/hosts/registrations.jsonl`, appended and fsynced before `register` answers, read
 *   back at start (a torn last line — a registration that never answered — is ignored). The token
 *   itself is never stored. At most MAX_HOSTS at once. A host removes itself (`unregister`): a line
 *   `{host_id, removed_at_ms}`, fsynced before it answers, and the registration is gone for good.
 *   At start, a file with more lines than it needs (removals and what they removed) is rewritten
 *   with only the registrations that stand (a new file, synced, then renamed over the old).
 * - Connections: a host has at most one command stream; a new one replaces it. Every call in flight
 *   belongs to the stream it was written to; when that stream is over, each of its calls fails
 *   `EnvironmentUncertain` `connection_lost` (it may have run) and is forgotten, so a late result is
 *   refused and nothing is ever written to another stream.
 * - Calls in flight are kept per host, named `{session_id, sequence}`: a host reaches only its own.
 *   A call's Events and its result pass one at a time through the call's lock, so an Event posted
 *   (and not yet answered) before the result is committed before the outcome.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Deferred, Duration, Effect, Exit, FiberId, Layer } from "effect"
import {
  Conflict,
  Internal,
  InvalidRequest,
  JournalCorrupt,
  JournalWriteFailed,
  NotFound,
  Overloaded,
  PayloadTooLarge
} from "../domain/Errors.js"
import type { Failure } from "../domain/Failure.js"
import { type HostId, isHostId, mintHostId } from "../domain/Ids.js"
import { HOST_COMMAND_QUEUE, HOST_TOKEN_BYTES, MAX_HOSTS } from "../domain/Limits.js"
import {
  type CallAnswer,
  type CancelAnswer,
  type EnvironmentCall,
  EnvironmentNotSent,
  EnvironmentUncertain
} from "../services/Environments.js"
import { type CallName, type HostAnswer, type HostEventError, Hosts, type HostsShape, type ResultError } from "../services/Hosts.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { CommandStreamBody } from "./hosts/CommandStream.js"
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
    default:
      return new Internal({ message: `${f.code}: ${f.message}`, retryable: f.retryable })
  }
}

const registrationsFile = (dataDir: string) => path.join(dataDir, "hosts", "registrations.jsonl")

/** The registrations that stand (each with its line, to rewrite the file), and how many lines the file has. */
const readRegistrations = (file: string) =>
  Effect.promise(() => fs.readFile(file, "utf8").catch(() => "")).pipe(
    Effect.map((text) => {
      const standing = new Map<HostId, { readonly digest: Buffer; readonly line: string }>()
      const removed = new Set<string>()
      let lines = 0
      for (const line of text.split("\n")) {
        if (line.trim() === "") continue
        lines++
        try {
          const r = JSON.parse(line) as { host_id?: unknown; token_sha256?: unknown; removed_at_ms?: unknown }
          if (!isHostId(r.host_id)) continue
          if (typeof r.removed_at_ms === "number") {
            standing.delete(r.host_id)
            removed.add(r.host_id)
          } else if (typeof r.token_sha256 === "string" && /^[0-9a-f]{64}$/.test(r.token_sha256) && !removed.has(r.host_id)) {
            standing.set(r.host_id, { digest: Buffer.from(r.token_sha256, "hex"), line })
          }
        } catch {
          // A torn line: its registration (or removal) never answered.
        }
      }
      return { standing, lines }
    })
  )

/** Lines past what the standing registrations need before the file is rewritten at start. */
const SPARE_LINES = 64

/** Replaces the file with `lines`: a new file, synced, renamed over the old, the directory synced. */
const rewriteDurably = async (file: string, lines: ReadonlyArray<string>) => {
  const next = `${file}.next`
  const handle = await fs.open(next, "w", 0o600)
  try {
    await handle.writeFile(lines.map((l) => `${l}\n`).join(""))
    await handle.sync()
  } finally {
    await handle.close()
  }
  await fs.rename(next, file)
  const d = await fs.open(path.dirname(file), "r")
  try {
    await d.sync()
  } finally {
    await d.close()
  }
}

/** Appends one line and makes it durable (the directory too, the first time). */
const appendDurably = async (file: string, line: string) => {
  const dir = path.dirname(file)
  const created = await fs.mkdir(dir, { recursive: true })
  const handle = await fs.open(file, "a", 0o600)
  try {
    await handle.appendFile(line)
    await handle.sync()
  } finally {
    await handle.close()
  }
  if (created !== undefined) {
    const d = await fs.open(dir, "r")
    try {
      await d.sync()
    } finally {
      await d.close()
    }
  }
}

export const make = (options: HostsOptions): Effect.Effect<HostsShape> =>
  Effect.gen(function*() {
    const hosts = new Map<string, Host>()
    const file = options.dataDir !== undefined ? registrationsFile(options.dataDir) : undefined
    if (file !== undefined) {
      const { standing, lines } = yield* readRegistrations(file)
      for (const [id, r] of standing) hosts.set(id, { id, digest: r.digest, connection: undefined, calls: new Map() })
      if (lines > standing.size + SPARE_LINES) {
        // Only a start rewrites: nothing appends meanwhile. A failure keeps the old file, which reads the same.
        yield* Effect.tryPromise(() => rewriteDurably(file, [...standing.values()].map((r) => r.line))).pipe(
          Effect.catchAll((e) => Effect.logWarning(`the host registrations file was not compacted: ${String(e.error)}`))
        )
      }
    }
    const appends = yield* Effect.makeSemaphore(1)
    let connections = 0

    const name = (host: string) => `host ${JSON.stringify(host)}`

    /** The stream `connection` of `host` is over: its calls in flight may have run. */
    const gone = (host: Host, connection: number) => {
      if (host.connection?.id === connection) host.connection = undefined
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

    const register: HostsShape["register"] = Effect.gen(function*() {
      if (hosts.size >= MAX_HOSTS) {
        return yield* Effect.fail(new Overloaded({ message: `this server keeps at most ${MAX_HOSTS} host registrations (MAX_HOSTS)`, retryable: false }))
      }
      const host_id = yield* mintHostId
      const token = `bht_${crypto.randomBytes(HOST_TOKEN_BYTES).toString("base64url")}`
      const digest = sha256(token)
      if (file !== undefined) {
        const line = JSON.stringify({ host_id, token_sha256: digest.toString("hex"), registered_at_ms: Date.now() }) + "\n"
        yield* appends.withPermits(1)(Effect.tryPromise({
          try: () => appendDurably(file, line),
          catch: (e) =>
            new Internal({ message: `the registration could not be stored: ${(e as NodeJS.ErrnoException).code ?? "error"}` })
        }))
      }
      hosts.set(host_id, { id: host_id, digest, connection: undefined, calls: new Map() })
      return { host_id, token }
    })

    const unregister: HostsShape["unregister"] = (id) =>
      Effect.gen(function*() {
        if (file !== undefined) {
          const line = JSON.stringify({ host_id: id, removed_at_ms: Date.now() }) + "\n"
          yield* appends.withPermits(1)(Effect.tryPromise({
            try: () => appendDurably(file, line),
            catch: (e) => new Internal({ message: `the removal could not be stored: ${(e as NodeJS.ErrnoException).code ?? "error"}` })
          }))
        }
        const host = hosts.get(id)
        hosts.delete(id)
        // Its stream ends: the calls in flight on it become uncertain (`gone`), as when a host drops it.
        host?.connection?.body.close()
      })

    const authorize: HostsShape["authorize"] = (host, token) => {
      const known = hosts.get(host)
      const same = crypto.timingSafeEqual(sha256(token), known?.digest ?? NOBODY)
      return known !== undefined && same
    }

    const connect: HostsShape["connect"] = (id) =>
      Effect.sync(() => {
        const host = hosts.get(id)!
        const previous = host.connection
        const connection = ++connections
        const body = new CommandStreamBody({ commands: HOST_COMMAND_QUEUE, heartbeatMs: options.heartbeatMs }, () => gone(host, connection))
        // The old stream is over first: its calls become uncertain and never reach the new one.
        previous?.body.close()
        host.connection = { id: connection, body }
        // The heartbeat interval lets the host tell a silent stream from a quiet one (0: no heartbeats).
        body.offer(frame("ready", { host_id: id, heartbeat_ms: options.heartbeatMs }))
        return { body, stop: Effect.sync(() => body.close()) }
      })

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

    return {
      register,
      unregister,
      isRegistered: (host) => hosts.has(host),
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

/** The registry as a layer: closing it ends every command stream, as a server's stop does. */
const scoped = <E, R>(made: Effect.Effect<HostsShape, E, R>): Layer.Layer<Hosts, E, R> =>
  Layer.scoped(Hosts, Effect.tap(made, (hosts) => Effect.addFinalizer(() => hosts.stopAll)))

export const layer = (options: HostsOptions): Layer.Layer<Hosts> => scoped(make(options))

/** The registry over the server's data directory and settings, as main.ts wires it. */
export const layerConfigured: Layer.Layer<Hosts, never, ServerConfig> = scoped(
  Effect.flatMap(ServerConfig, (config) =>
    make({
      dataDir: path.resolve(config.dataDir),
      graceMs: config.cancelGraceMs,
      heartbeatMs: config.sseHeartbeatMs,
      maxResultBytes: config.maxEnvironmentResponseBytes
    }))
)
