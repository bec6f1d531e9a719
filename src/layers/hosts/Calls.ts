/**
 * A host's calls in flight (docs/environments.md, "The `host` driver"): each sent on the host's
 * command stream as a `call` frame, answered by the host's result, cancelled by a `cancel` frame.
 *
 * - Calls in flight are kept per host, named `{session_id, sequence}`: a host reaches only its own.
 * - A call whose `call` frame still waits in its stream's backlog (CommandStream.ts) when it is
 *   stopped — cancelled, past its deadline, abandoned, or its stream over — has the frame
 *   withdrawn: it is never written, it is not sent (`EnvironmentNotSent`, or a cancel answered
 *   `withdrawn`), and no `cancel` frame follows it. Only a call whose frame was handed to the
 *   connection is sent, and may have run.
 * - Every call belongs to the stream it was written to; when that stream is over, each of its calls
 *   fails, `EnvironmentNotSent` `host_disconnected` if its frame was withdrawn, else
 *   `EnvironmentUncertain` `connection_lost` (it may have run), and is forgotten (`loseCalls`), so
 *   a late result is refused and nothing is ever written to another stream.
 * - A call's Events and its result pass one at a time through the call's lock, so an Event posted
 *   (and not yet answered) before the result is committed before the outcome.
 * - A batch of results is all or none: a refusal changes nothing.
 * - A result is acknowledged only once the outcome record of each call it answers is durable (the
 *   session's tool call tells: `EnvironmentCall.recorded`), so that a crash after the 204 loses
 *   nothing; an outcome that could not be recorded is `journal_write_failed` instead, never a 204.
 * - A result taken is remembered a while (hosts/Taken.ts): the same result again for its call (a
 *   host whose answer was lost posts it again) is answered as the first was — once the same
 *   receipt says recorded, or `outcome_unrecorded` — and changes nothing; a different one is 409
 *   `result_conflict`. A result for a call neither in flight nor remembered is 409 `not_in_flight`.
 */
import { Duration, Effect, Exit } from "effect"
import {
  Conflict,
  Internal,
  InvalidRequest,
  JournalCorrupt,
  JournalWriteFailed,
  NotFound,
  Overloaded,
  PayloadTooLarge
} from "../../domain/Errors.js"
import type { Failure } from "../../domain/Failure.js"
import type { HostId } from "../../domain/Ids.js"
import { HOST_COMMAND_QUEUE, HOST_TAKEN_RESULT_MS, HOST_TAKEN_RESULTS, TIMER_SETTING_MAX_MS } from "../../domain/Limits.js"
import {
  type CallAnswer,
  type CancelAnswer,
  type CancelRequest,
  type EnvironmentCall,
  EnvironmentNotSent,
  EnvironmentUncertain
} from "../../services/Environments.js"
import type { CallName, HostAnswer, HostEventError, HostsShape, ResultError } from "../../services/Hosts.js"
import { namedFrame as frame } from "../sessions/SseFrames.js"
import { Once, waitFor } from "../Waits.js"
import { answerCall, type Host, hostName, type InFlight, keyOf } from "./Host.js"
import { answerDigest, type TakenBounds, TakenResults } from "./Taken.js"

/**
 * A tool-origin Event the session refused, as the host's answer: a reserved kind is the request's
 * fault (400) and the turn's byte budgets (its Events', its writes') its size (413), each saying
 * which in `details.reason`; the session's storage refusals keep their code. The session answers
 * nothing else here.
 */
const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const eventRefused = (f: Failure): HostEventError => {
  switch (f.code) {
    case "reserved_kind":
      return new InvalidRequest({ message: f.message, details: { reason: f.code } })
    case "emitted_bytes_limit":
    case "turn_write_limit":
      // The session's journal bound keeps its own reason and figures (`session_journal_limit`).
      return new PayloadTooLarge({ message: f.message, details: { reason: f.code, ...(isObject(f.details) ? f.details : {}) } })
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

/**
 * The stream `connection` of `host` is over: each of its calls in flight fails, not sent if its
 * frame still waited in the backlog (withdrawn now), else uncertain (it may have run), and is forgotten.
 */
export const loseCalls = (host: Host, connection: number) => {
  for (const [key, call] of host.calls) {
    if (call.connection !== connection) continue
    host.calls.delete(key)
    answerCall(
      call,
      Exit.fail(
        call.frame?.withdraw() === true
          ? new EnvironmentNotSent({
            environment: call.environment,
            reason: "host_disconnected",
            message: `Environment ${JSON.stringify(call.environment)}: the command stream of ${hostName(host.id)} was closed while the call still waited in Brain's queue; nothing was sent`
          })
          : new EnvironmentUncertain({
            environment: call.environment,
            reason: "connection_lost",
            message: `the command stream of ${hostName(host.id)} was closed while the call was in flight; it may have run`
          })
      )
    )
  }
}

export interface CallsOptions {
  /** Milliseconds a cancel waits for the host's confirmation (BRAIN_CANCEL_GRACE_MS). */
  readonly graceMs: number
  /** Bytes of a result's `ok`/`error` value (as JSON) at most (BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES). */
  readonly maxResultBytes: number
  /** The bound on an outcome's commit (BRAIN_CLEANUP_DEADLINE_MS); 0 or undefined: none. */
  readonly cleanupDeadlineMs?: number | undefined
  /** How many taken results are remembered, and how long (HOST_TAKEN_RESULTS, HOST_TAKEN_RESULT_MS when undefined). */
  readonly takenResults?: TakenBounds | undefined
  /** The registry's clock, in milliseconds (what a remembered result's age is counted by). */
  readonly now: () => number
}

/** The registry's methods for calls in flight, over its registered `hosts`. */
export const makeCalls = (
  hosts: ReadonlyMap<string, Host>,
  options: CallsOptions
): Pick<HostsShape, "result" | "results" | "event" | "send" | "call" | "cancel"> => {
  /** A refusal's details; in a batch they also name the result (`index`). */
  const detailsOf = (details: Record<string, unknown>, index: number | undefined) => (index === undefined ? details : { ...details, index })

  /**
   * How long a result waits for its outcome records: each commit is bounded by the cleanup deadline
   * (one may wait behind another of its round), and a cancelled call's stop by the grace. 0: as
   * long as the journal takes, as the fence waits (no bound on its commit either).
   */
  const cleanupMs = options.cleanupDeadlineMs ?? 0
  const recordWithinMs = cleanupMs > 0 ? 2 * cleanupMs + options.graceMs : 0
  const taken = new TakenResults(options.takenResults ?? { max: HOST_TAKEN_RESULTS, keepMs: HOST_TAKEN_RESULT_MS }, options.now)

  const unrecorded = (call: CallName, index: number | undefined, why: string) =>
    new JournalWriteFailed({
      message: `the answer to ${call.session}/${call.sequence} was taken, but its outcome ${why}; the call counts as unknown and cannot be answered again`,
      details: detailsOf({ reason: "outcome_unrecorded", ambiguous: true }, index)
    })

  /**
   * Waits for the outcome records of the calls just settled: one callback on each call's receipt
   * and one timer for the whole request (no fiber, no timer per call: a result is the hot path of
   * a host tool). Fails at the first receipt that says not durable, naming it, or at the deadline,
   * naming the first not yet recorded; whatever ends the wait stops every callback and the timer.
   */
  const recordedAll = (
    settled: ReadonlyArray<{ readonly index: number; readonly call: CallName; readonly recorded: EnvironmentCall["recorded"] }>,
    batch: boolean
  ) =>
    Effect.suspend((): Effect.Effect<void, JournalWriteFailed> => {
      const waiting = settled.filter((c) => c.recorded !== undefined)
      if (waiting.length === 0) return Effect.void
      return waitFor<void, JournalWriteFailed>((resume) => {
        const done = new Array<boolean>(waiting.length).fill(false)
        const stops: Array<() => void> = []
        let left = waiting.length
        let over = false
        let timer: ReturnType<typeof setTimeout> | undefined
        const end = () => {
          over = true
          if (timer !== undefined) clearTimeout(timer)
          for (const stop of stops) stop()
        }
        for (let i = 0; i < waiting.length && !over; i++) {
          const c = waiting[i]!
          // Called at once when the receipt is known already.
          stops.push(c.recorded!((recorded) => {
            if (over || done[i]) return
            done[i] = true
            if (!recorded) {
              end()
              return resume(Effect.fail(unrecorded(c.call, batch ? c.index : undefined, "could not be recorded (the journal failed or did not answer in time)")))
            }
            if (--left === 0) {
              end()
              resume(Effect.void)
            }
          }))
        }
        // Past the host timer's range a deadline cannot fire: the same as no bound.
        if (!over && recordWithinMs > 0 && recordWithinMs <= TIMER_SETTING_MAX_MS) {
          timer = setTimeout(() => {
            if (over) return
            const first = waiting[done.indexOf(false)]!
            end()
            resume(Effect.fail(unrecorded(first.call, batch ? first.index : undefined, `was not recorded within ${recordWithinMs} ms`)))
          }, recordWithinMs)
        }
        // An interrupted caller stops waiting; the records go on.
        return () => {
          if (!over) end()
        }
      })
    })

  const notInFlight = (call: CallName, index?: number) =>
    new Conflict({
      message: `no call ${call.session}/${call.sequence} is in flight on this host: it never came, it has ended, or its stream was closed`,
      details: detailsOf({ reason: "not_in_flight" }, index)
    })

  const resultConflict = (call: CallName, index: number | undefined) =>
    new Conflict({
      message: `the call ${call.session}/${call.sequence} was answered already, with another result: this one is not taken`,
      details: detailsOf({ reason: "result_conflict" }, index)
    })

  const inFlight = (id: HostId, call: CallName) => {
    const found = hosts.get(id)?.calls.get(keyOf(call))
    return found !== undefined ? Effect.succeed(found) : Effect.fail(notInFlight(call))
  }

  /** Whether `pending`, the call `key`, is still in flight (not settled by another request meanwhile). */
  const still = (id: HostId, key: string, pending: InFlight) => hosts.get(id)?.calls.get(key) === pending

  /** The JSON of an answer's value (`ok`, `error`), as it is measured and remembered; none for `stopped`. */
  const jsonOf = (answer: HostAnswer): string | undefined =>
    "stopped" in answer ? undefined : JSON.stringify(("ok" in answer ? answer.ok : answer.error) ?? null)

  /** Why an answer whose value's JSON is `json` (none: `stopped`) cannot settle `pending`, or undefined when it can. */
  const refusal = (pending: InFlight, json: string | undefined, index: number | undefined): Conflict | PayloadTooLarge | undefined => {
    if (json === undefined) {
      return pending.cancelSent
        ? undefined
        : new Conflict({
          message: "no cancel was sent for this call: answer it with ok or error",
          details: detailsOf({ reason: "not_cancelled" }, index)
        })
    }
    const bytes = Buffer.byteLength(json, "utf8")
    return bytes > options.maxResultBytes
      ? new PayloadTooLarge({
        message: `the result's value is ${bytes} bytes, more than ${options.maxResultBytes} (BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES); the call is still in flight`,
        ...(index === undefined ? {} : { details: { index } })
      })
      : undefined
  }

  /**
   * Settles calls in flight on `host`, all or none: each result is checked first (in flight on
   * this host, named once, `stopped` only after a cancel, its value within bounds; or the same
   * result the call was answered with, remembered), then every call's lock is taken (in one
   * order, so two batches never wait on each other), each is checked again, and only then are
   * they all settled, in one step, and remembered. A refusal changes nothing. The answer waits for
   * the receipts of every call named, the repeated ones' too: a repeat is answered as the first.
   */
  const settle = (id: HostId, items: ReadonlyArray<{ readonly call: CallName; readonly answer: HostAnswer }>, batch: boolean) =>
    Effect.suspend((): Effect.Effect<void, ResultError | InvalidRequest> => {
      const named = new Set<string>()
      const checked: Array<
        {
          readonly key: string
          readonly index: number
          readonly call: CallName
          readonly answer: HostAnswer
          readonly digest: string
          readonly pending: InFlight
          readonly recorded: EnvironmentCall["recorded"]
        }
      > = []
      /** Results the calls named were answered with already: nothing to settle, their receipts to wait for. */
      const repeated: Array<{ readonly index: number; readonly call: CallName; readonly recorded: EnvironmentCall["recorded"] }> = []
      for (let i = 0; i < items.length; i++) {
        const { answer, call } = items[i]
        const index = batch ? i : undefined
        const key = keyOf(call)
        if (named.has(key)) {
          return Effect.fail(new InvalidRequest({ message: `the batch names the call ${key} more than once`, details: { index: i } }))
        }
        named.add(key)
        const json = jsonOf(answer)
        const pending = hosts.get(id)?.calls.get(key)
        if (pending === undefined) {
          const known = taken.find(id, key)
          if (known === undefined) return Effect.fail(notInFlight(call, index))
          if (known.digest !== answerDigest(answer, json)) return Effect.fail(resultConflict(call, index))
          repeated.push({ index: i, call, recorded: known.recorded })
          continue
        }
        const refused = refusal(pending, json, index)
        if (refused !== undefined) return Effect.fail(refused)
        checked.push({ key, index: i, call, answer, digest: answerDigest(answer, json), pending, recorded: pending.recorded })
      }
      // The locks of the calls that have posted Events: an Event in flight is committed first.
      const ordered = checked.filter((c) => c.pending.lock !== undefined).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
      const held = new Set(ordered.map((c) => c.pending.lock))
      /** Settles the calls once their locks are held; false (nothing settled) when a call posted its first Event meanwhile. */
      const take = Effect.suspend((): Effect.Effect<boolean, Conflict> => {
        if (checked.some((c) => c.pending.lock !== undefined && !held.has(c.pending.lock))) return Effect.succeed(false)
        // Settled meanwhile (another result, the same one again, or the stream closed): nothing is
        // taken, and the results are checked again (a call settled meanwhile is no longer in flight).
        if (checked.some((c) => !still(id, c.key, c.pending))) return Effect.succeed(false)
        const calls = hosts.get(id)!.calls
        for (const { answer, digest, key, pending } of checked) {
          calls.delete(key)
          taken.remember(id, key, digest, pending.recorded)
          if ("stopped" in answer) pending.stopped!.give(undefined)
          else answerCall(pending, Exit.succeed<CallAnswer>("ok" in answer ? { outcome: "ok", output: answer.ok } : { outcome: "error", output: answer.error }))
        }
        return Effect.succeed(true)
      })
      const locked = ordered.reduceRight<Effect.Effect<boolean, Conflict>>((inner, c) => c.pending.lock!.withPermits(1)(inner), take)
      // A call that posted its first Event, or was settled, while this waited: again (locks are
      // only ever made and calls only ever leave, so this ends).
      return Effect.flatMap(
        locked,
        (settled) => (settled ? recordedAll(repeated.length === 0 ? checked : [...checked, ...repeated], batch) : settle(id, items, batch))
      )
    })

  // One result names one call: never twice.
  const result: HostsShape["result"] = (id, call, answer) => Effect.catchTag(settle(id, [{ call, answer }], false), "InvalidRequest", Effect.die)
  const results: HostsShape["results"] = (id, items) => settle(id, items, true)

  const event: HostsShape["event"] = (id, call, kind, payload) =>
    Effect.gen(function*() {
      const pending = yield* inFlight(id, call)
      const lock = (pending.lock ??= Effect.unsafeMakeSemaphore(1))
      return yield* lock.withPermits(1)(Effect.gen(function*() {
        if (!still(id, keyOf(call), pending)) return yield* Effect.fail(notInFlight(call))
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
    if (host === undefined) return notSent("host_unknown", `${hostName(id)} is not registered`)
    const connection = host.connection
    if (connection === undefined) return notSent("host_disconnected", `${hostName(id)} has no open command stream`)
    const key = keyOf(request)
    const pending: InFlight = {
      connection: connection.id,
      environment,
      frame: undefined,
      answered: undefined,
      resume: undefined,
      stopped: undefined,
      cancelSent: false,
      emit: request.emit,
      recorded: request.recorded,
      lock: undefined
    }
    host.calls.set(key, pending)
    const queued = connection.body.offer(frame("call", {
      session_id: request.session,
      sequence: request.sequence,
      environment,
      name: request.name,
      call_id: request.callId,
      input: request.input,
      deadline_at_ms: request.deadlineAtMs
    }))
    if (queued === undefined) {
      host.calls.delete(key)
      return notSent("host_busy", `${hostName(id)} has ${HOST_COMMAND_QUEUE} commands waiting to be read and its connection takes no more (HOST_COMMAND_QUEUE)`)
    }
    pending.frame = queued
    // One callback, not a Deferred and a finalizer: a caller that stops waiting takes the call
    // out of the host's calls (an answered one is out already), and its frame out of the backlog
    // if it still waits there: nobody would hear its answer.
    return {
      await: (f) => {
        if (pending.answered !== undefined) f(pending.answered)
        else pending.resume = f
      },
      abandon: () => {
        pending.resume = undefined
        if (host.calls.get(key) === pending) {
          host.calls.delete(key)
          queued.withdraw()
        }
      },
      cancel: (reason, confirmed) => {
        const sentNow = cancelNow(id, { session: request.session, sequence: request.sequence, reason })
        return sentNow.sent ? { sent: true, stopListening: sentNow.stopped.listen(confirmed) } : sentNow
      }
    }
  }

  /**
   * Offers a call's `cancel` frame to the stream the call went out on, in this step (the frames
   * offered in one step are one write: CommandStream.ts); its confirmation to come, or why
   * nothing was sent. A call whose own frame still waits in the backlog is withdrawn instead: it
   * was never sent, so it gets no cancel, and it is answered not sent (`withdrawn`).
   */
  const cancelNow = (
    id: string,
    request: CallName & { readonly reason: CancelRequest["reason"] }
  ): { readonly sent: true; readonly stopped: Once<void> } | { readonly sent: false; readonly withdrawn?: true; readonly why: string } => {
    const host = hosts.get(id)
    const key = keyOf(request)
    const pending = host?.calls.get(key)
    if (host === undefined || pending === undefined) return { sent: false, why: `the call is not in flight on ${hostName(id)}` }
    if (pending.frame?.withdraw() === true) {
      host.calls.delete(key)
      const why = `the call still waited in Brain's queue for ${hostName(id)}, which was not reading its command stream: it was taken back, never sent`
      answerCall(pending, Exit.fail(new EnvironmentNotSent({ environment: pending.environment, reason: "host_busy", message: `Environment ${JSON.stringify(pending.environment)}: ${why}` })))
      return { sent: false, withdrawn: true, why }
    }
    const connection = host.connection
    if (connection === undefined || connection.id !== pending.connection) return { sent: false, why: `the command stream of ${hostName(id)} was closed` }
    if (connection.body.offer(frame("cancel", { session_id: request.session, sequence: request.sequence, reason: request.reason })) === undefined) {
      return { sent: false, why: `${hostName(id)} has ${HOST_COMMAND_QUEUE} commands waiting to be read: the cancel was not sent` }
    }
    pending.cancelSent = true
    return { sent: true, stopped: (pending.stopped ??= new Once<void>()) }
  }

  const call: HostsShape["call"] = (id, request) =>
    Effect.suspend((): Effect.Effect<CallAnswer, EnvironmentNotSent | EnvironmentUncertain> => {
      const sent = send(id, request)
      if (sent instanceof EnvironmentNotSent) return Effect.fail(sent)
      return waitFor<CallAnswer, EnvironmentNotSent | EnvironmentUncertain>((resume) => {
        sent.await(resume)
        return sent.abandon
      })
    })

  const cancel: HostsShape["cancel"] = (id, request) =>
    Effect.suspend((): Effect.Effect<CancelAnswer> => {
      const sentNow = cancelNow(id, request)
      // A call taken back before it was sent will never run: as good as a confirmed stop.
      if (!sentNow.sent) return Effect.succeed<CancelAnswer>(sentNow.withdrawn === true ? { confirmed: true } : { confirmed: false, why: sentNow.why })
      return sentNow.stopped.await.pipe(
        Effect.as<CancelAnswer>({ confirmed: true }),
        Effect.timeoutTo({
          duration: Duration.millis(options.graceMs),
          onSuccess: (a) => a,
          onTimeout: (): CancelAnswer => ({ confirmed: false, why: `${hostName(id)} did not confirm the cancel within ${options.graceMs} ms (BRAIN_CANCEL_GRACE_MS)` })
        })
      )
    })

  return { result, results, event, send, call, cancel }
}
