/**
 * One call a host runs (Host.ts takes it from the command stream):
 *
 * - A run decodes the input, runs the tool, encodes its output and posts one result: `ok`, or
 *   `error` with `code` `invalid_input` / `tool_error` / `invalid_output` / `unknown_tool`. No
 *   way out of a run ends without it: a thrown value whose message cannot be read is described
 *   by a fixed text (`describeThrown`), an output that is not JSON (its request cannot be
 *   encoded, so nothing is sent) is `invalid_output` saying why (`jsonIssue`), and a failure of
 *   the host's own is `tool_error`. Its Events are posted first:
 *   the result waits until every `emit` has been answered. A post that gets no answer is posted
 *   again, the same result, until answered or the run is lost (`deliver`). A result the
 *   server refuses (too large) is answered once more, so that the call does not wait for its
 *   deadline: an output as the error `invalid_output`, an error cut down to its code and the
 *   start of its message (REFUSED_ERROR_MESSAGE_CHARS). A result taken whose outcome Brain could
 *   not record (`outcome_unrecorded`) is posted no more (a repeat gets the same answer), and one that
 *   could not be delivered (`undelivered`) is posted no more either: both are told to the tool's
 *   `onUnrecorded` as a `ToolResultUnrecorded`.
 * - `cancel` aborts the run's signal; a run that then throws is confirmed `{"stopped": true}`, one
 *   that returns anyway is answered with its output. A local deadline aborts the signal at
 *   `deadline_at_ms`; Brain sends a cancel at the same time, and the stop is confirmed to it.
 * - A call over before its tool would start is never started: the frames of one read are all
 *   taken before any of its calls starts, and a call cancelled by then (its `cancel` came in the
 *   same read, or while its input was being decoded), or whose `deadline_at_ms` has passed, is
 *   not run. Its stop is confirmed `{"stopped": true}` to its cancel — at once, or when Brain's
 *   cancel for the passed deadline comes (`stopped` is refused before a cancel). This is what a
 *   host that was slow or paused meets: frames Brain wrote before it stopped the call, waiting in
 *   the socket's buffers.
 */
import type { SessionId } from "../domain/Ids.js"
import { nestsDeeperThan } from "../domain/JsonText.js"
import { MAX_JSON_DEPTH } from "../domain/Limits.js"
import type * as Schemas from "../http/Schemas.js"
import { BrainClosed, BrainError, isOutcomeUnrecorded, isUncertain } from "./Errors.js"
import { type HostTool, ToolAborted, type ToolContext, ToolResultUnrecorded } from "./Tool.js"
import { sleep, type Transport } from "./Transport.js"
import { decode, describeIssues, encode, type Issue } from "./Validate.js"

export interface CallCommand {
  readonly session_id: string
  readonly sequence: number
  readonly environment: string
  readonly name: string
  readonly call_id: string
  readonly input: unknown
  readonly deadline_at_ms: number
}

export interface CancelCommand {
  readonly session_id: string
  readonly sequence: number
  readonly reason: "cancel" | "deadline"
}

export type Answer = { readonly ok: unknown } | { readonly error: unknown } | { readonly stopped: true }

export interface Run {
  readonly call: CallCommand
  readonly connection: number
  readonly controller: AbortController
  /** Aborts when it is lost (`lose`): a result still being posted is posted no more. */
  readonly gone: AbortController
  /** A cancel command arrived for it. */
  cancelled: boolean
  /** Its stream is over (or the client closed): nothing new may be posted for it (a result already
   * posted whose attempt got no answer is asked about once: `deliver`). */
  lost: boolean
  /** It stopped on its own deadline and waits for Brain's cancel to confirm the stop to. */
  awaitingCancel: boolean
  /** The result is being posted: later emits are refused. */
  settled: boolean
  readonly emits: Set<Promise<unknown>>
  timer: ReturnType<typeof setTimeout> | undefined
  /** Confirms the stop of a run that stopped on its own deadline to Brain's cancel (`awaitingCancel`). */
  readonly confirmStop: () => Promise<void>
}

export type HostResult = typeof Schemas.HostResult.Type

/** A call's name on the wire (the session id is the server's own, as it sent it). */
export const callOf = (c: { readonly session_id: string; readonly sequence: number }) => ({
  session_id: c.session_id as SessionId,
  sequence: c.sequence
})

/** What stands for a thrown value whose message cannot be read. */
const UNDESCRIBED = "the tool threw a value that cannot be described (reading its message or string form threw)"

/**
 * A thrown value's message: an Error's `message`, anything else's string form. Never throws: a
 * value whose message cannot be read (`Object.create(null)`, a throwing getter, a Proxy that traps
 * reads) is described by its kind, or by UNDESCRIBED.
 */
export const describeThrown = (e: unknown): string => {
  try {
    if (e instanceof Error) {
      const message: unknown = e.message
      return typeof message === "string" ? message : String(message)
    }
    return String(e)
  } catch {
    try {
      return `${UNDESCRIBED}: ${Object.prototype.toString.call(e)}`
    } catch {
      return UNDESCRIBED
    }
  }
}

/** Depth past which `jsonIssue` stops looking for what does not encode (the server refuses a result nested deeper anyway). */
const JSON_SEARCH_DEPTH = MAX_JSON_DEPTH
/** Values `jsonIssue` looks at at most: an object shared many times over is not walked without bound. */
const JSON_SEARCH_VALUES = 100_000

/**
 * Why `value` cannot be sent as JSON, if it cannot: the first place (depth first) holding a bigint
 * or an object that contains itself, or `JSON.stringify`'s own message (a `toJSON` that throws,
 * say). `undefined` when it encodes. Never throws.
 */
export const jsonIssue = (value: unknown): Issue | undefined => {
  try {
    if (JSON.stringify(value) !== undefined) return undefined
    return { path: [], message: `a ${typeof value} has no JSON form` }
  } catch (e) {
    let budget = JSON_SEARCH_VALUES
    const found = (v: unknown, path: Array<string | number>, within: Array<unknown>): Issue | undefined => {
      if (typeof v === "bigint") return { path, message: "a bigint has no JSON form" }
      if (typeof v !== "object" || v === null || path.length > JSON_SEARCH_DEPTH || --budget < 0) return undefined
      if (within.includes(v)) return { path, message: "this object contains itself (a cycle), which JSON cannot hold" }
      if (typeof (v as { toJSON?: unknown }).toJSON === "function") return undefined
      const inner = [...within, v]
      for (const [k, x] of Array.isArray(v) ? v.map((x, i) => [i, x] as const) : Object.entries(v)) {
        const issue = found(x, [...path, k], inner)
        if (issue !== undefined) return issue
      }
      return undefined
    }
    let issue: Issue | undefined
    try {
      issue = found(value, [], [])
      // Nested thousands deep, JSON.stringify overflows the stack: that says why, not its RangeError.
      if (issue === undefined && nestsDeeperThan(value, MAX_JSON_DEPTH, JSON_SEARCH_VALUES)) {
        issue = { path: [], message: `it nests deeper than ${MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH, the most the server takes)` }
      }
    } catch {
      issue = undefined
    }
    return issue ?? { path: [], message: describeThrown(e) }
  }
}

/** The error that stands for an output that cannot be sent as JSON. */
const notJson = (issue: Issue) => ({
  code: "invalid_output",
  message: `the output cannot be encoded as JSON: ${describeIssues([issue])}`,
  issues: [issue]
})

/** Milliseconds before a result whose post got no answer is posted again, doubled up to the max
 * (each post is itself sent up to MAX_ATTEMPTS times by the client): a short outage is ridden out
 * quickly, a long one costs one request per REPOST_MAX_MS. */
export const REPOST_FIRST_MS = 250
export const REPOST_MAX_MS = 2_000

/** How a result's posting ended: taken, or not (`refusal`: the answer or failure that ended it;
 * none when the run was lost before an attempt failed). */
export type Delivery =
  | { readonly taken: true }
  | { readonly taken: false; readonly lost: boolean; readonly refusal: BrainError | undefined }

/** A failure to post a result, as a BrainError. */
const postFailure = (e: unknown) =>
  e instanceof BrainError ? e : new BrainError({ code: "bad_response", status: 0, retryable: false, message: `posting the result failed: ${describeThrown(e)}` })

/**
 * Posts `result` of `run` until the server answers it: posted again, the same result, while its
 * posts get no answer (`isUncertain`: no answer arrived, a gateway's page, a retryable overload),
 * REPOST_FIRST_MS doubled up to REPOST_MAX_MS apart, for as long as the call can still be
 * answered — until its stream drops or the client closes (`lose`). Any answer ends it: taken
 * (204), or refused (409: the call is no longer in flight, having ended without this result; 401:
 * the host is gone; 400, 413, 500). A repeat is safe: Brain remembers the results it took and
 * answers the same result again as it answered the first (204 once the outcome is durable: an
 * earlier attempt landed), changing nothing. The tool is never run again; only its one result is
 * posted again.
 *
 * A run lost after an attempt that got no answer (which may have landed) asks once more
 * (`askResult`, while the client is open): taken, Brain says so again; not taken, the call ended
 * without it when its stream dropped (409 `not_in_flight`). Either way the server changes nothing
 * but what the first attempt would have, and the tool is told only what is so.
 */
export const deliver = async (owner: Pick<CallOwner, "postResult" | "askResult">, run: Run, result: HostResult): Promise<Delivery> => {
  let pause = REPOST_FIRST_MS
  let last: BrainError | undefined
  /** The run is lost: asks about an attempt that may have landed, if one was made. */
  const lost = async (): Promise<Delivery> => {
    if (last === undefined) return { taken: false, lost: true, refusal: undefined }
    try {
      await owner.askResult(result)
      return { taken: true }
    } catch (e) {
      return { taken: false, lost: true, refusal: e instanceof BrainClosed ? last : postFailure(e) }
    }
  }
  for (;;) {
    if (run.lost) return lost()
    try {
      if (await owner.postResult(result, run)) return { taken: true }
      return lost()
    } catch (e) {
      // The client closed: the attempt was abandoned, not answered.
      if (e instanceof BrainClosed) return { taken: false, lost: true, refusal: last }
      const failure = postFailure(e)
      if (!isUncertain(failure)) return { taken: false, lost: run.lost, refusal: failure }
      last = failure
      if (run.lost) return lost()
      await sleep(pause, run.gone.signal).catch(() => undefined)
      pause = Math.min(pause * 2, REPOST_MAX_MS)
    }
  }
}

/** Characters of an error's message kept when the server refused the whole error result (too
 * large): enough to say what went wrong, far below any result bound a server would set. */
export const REFUSED_ERROR_MESSAGE_CHARS = 4_096

/**
 * What stands in for an error result the server refused: its code, and its message cut to
 * REFUSED_ERROR_MESSAGE_CHARS, saying that it was cut and why; its other fields (`issues`) are
 * left out, and said to be.
 */
const boundedError = (error: unknown, refusal: BrainError): { readonly code: string; readonly message: string } => {
  const fields = typeof error === "object" && error !== null ? (error as { readonly code?: unknown; readonly message?: unknown }) : {}
  const code = typeof fields.code === "string" ? fields.code.slice(0, 64) : "tool_error"
  const message = typeof fields.message === "string" ? fields.message : ""
  const why = `the server refused the whole error (${refusal.code}: ${refusal.message.slice(0, 512)})`
  return {
    code,
    message: message.length > REFUSED_ERROR_MESSAGE_CHARS
      ? `${message.slice(0, REFUSED_ERROR_MESSAGE_CHARS)} [cut: the first ${REFUSED_ERROR_MESSAGE_CHARS} of ${message.length} characters; ${why}]`
      : `${message} [${why}; only its code and message are kept]`
  }
}

/** `run` is over for the host (its stream dropped, or the client closed): its signal aborts and nothing new is posted for it. */
export const lose = (run: Run, reason: ToolAborted["reason"], message: string) => {
  run.lost = true
  run.gone.abort()
  if (run.timer !== undefined) clearTimeout(run.timer)
  if (!run.controller.signal.aborted) run.controller.abort(new ToolAborted({ reason, message }))
}

/** What a run needs from the host that took its call. */
export interface CallOwner {
  /** The stream's transport (the host's own token), and the host. */
  readonly transport: Transport
  readonly hostId: string
  /** The tool that runs `name` for `session`, if any. */
  readonly toolFor: (session: string, name: string) => HostTool | undefined
  /** Posts one result of the run (HostResults.ts): `true` once taken, `false` when the run was lost
   * first (nothing posted); rejects with its refusal. */
  readonly postResult: (result: HostResult, run: Run) => Promise<boolean>
  /** Posts a lost run's result once more, alone (`deliver` says when): resolves once taken; rejects
   * with its refusal, or BrainClosed once the client closed. */
  readonly askResult: (result: HostResult) => Promise<void>
  /** The run is over (its result posted, or nothing to post). */
  readonly over: (run: Run) => void
}

/**
 * Takes `call`, carried by stream `connection`: its run, and the function that starts it. Its
 * local deadline is armed at once.
 */
export const takeCall = (call: CallCommand, connection: number, owner: CallOwner): { readonly run: Run; readonly start: () => void } => {
  const run: Run = {
    call,
    connection,
    controller: new AbortController(),
    gone: new AbortController(),
    cancelled: false,
    lost: false,
    awaitingCancel: false,
    settled: false,
    emits: new Set(),
    timer: undefined,
    // Its Events first, as for every result.
    confirmStop: () => post({ stopped: true })
  }
  const untilDeadline = call.deadline_at_ms > 0 ? call.deadline_at_ms - Date.now() : undefined
  if (untilDeadline !== undefined && untilDeadline < 2 ** 31 - 1) {
    run.timer = setTimeout(
      () => run.controller.abort(new ToolAborted({ reason: "deadline", message: "the tool call passed its deadline" })),
      Math.max(0, untilDeadline)
    )
  }
  /** Posts the call's one result; `replacing` marks the stand-in for a refused one, never replaced itself. */
  const post = async (answer: Answer, replacing = false): Promise<void> => {
    run.settled = true
    await Promise.allSettled([...run.emits])
    if (run.lost) return
    const delivery = await deliver(owner, run, { ...callOf(call), ...answer } as HostResult)
    if (delivery.taken || "stopped" in answer) return
    const e = delivery.refusal
    // Lost before any attempt failed: its signal said so (`connection_lost`, `closed`).
    if (e === undefined) return
    // Taken, but its outcome could not be recorded: a repeat gets the same answer; the tool is told.
    if (isOutcomeUnrecorded(e as unknown)) return unrecorded("outcome_unrecorded", e)
    // A result the server refuses (too large, not JSON) leaves the call in flight: answer it
    // once more, with a result it takes — an output as the error `invalid_output`, an error cut
    // down to its code and the start of its message — or the call would wait for its deadline
    // and end `timeout`, ambiguous. Not for a call that is over (409), a host that is gone (401),
    // or a run that is lost.
    if (!replacing && !delivery.lost && !isUncertain(e) && e.status !== 409 && e.status !== 401) {
      if ("ok" in answer) {
        // An output that is not JSON never left this process: its request could not be encoded.
        const issue = e.status === 400 ? jsonIssue(answer.ok) : undefined
        if (issue !== undefined) return post({ error: notJson(issue) }, true)
        return post({ error: { code: "invalid_output", message: `the server refused the output: ${e.message}` } }, true)
      } else if ("error" in answer) {
        return post({ error: boundedError(answer.error, e) }, true)
      }
    }
    return unrecorded("undelivered", e)
  }
  const unrecorded = (reason: ToolResultUnrecorded["reason"], refusal: BrainError) => {
    const tool = owner.toolFor(call.session_id, call.name)
    const error = new ToolResultUnrecorded({
      message: reason === "outcome_unrecorded"
        ? `Brain took the result of ${call.name} (${call.session_id}/${call.sequence}) but could not record the call's outcome: ${refusal.message}`
        : `the result of ${call.name} (${call.session_id}/${call.sequence}) could not be delivered to Brain (${refusal.code}: ${refusal.message}); an attempt whose answer was lost with no repeat answered after it may have landed: the session's outcome Event of this call says what Brain recorded`,
      reason,
      sessionId: call.session_id,
      sequence: call.sequence,
      refusal
    })
    try {
      tool?.onUnrecorded?.(error)
    } catch {
      // The application's hook threw: nothing of the host's depends on it.
    }
  }
  const ctx: ToolContext = {
    signal: run.controller.signal,
    sessionId: call.session_id,
    sequence: call.sequence,
    callId: call.call_id,
    deadlineAtMs: call.deadline_at_ms,
    emit: (kind, payload) => {
      if (run.settled || run.lost) {
        // Refused here as the server refuses an Event for a call not in flight: nothing is sent.
        return Promise.reject(
          new BrainError({ code: "conflict", status: 409, retryable: false, message: "this tool call is over: its Events can no longer be committed" })
        )
      }
      const sent = owner.transport.call((client) => client.hosts.events(owner.hostId, { ...callOf(call), kind, payload: payload ?? null }))
        .then((r) => r.sequence)
      const tracked = sent.catch(() => undefined)
      run.emits.add(tracked)
      void tracked.then(() => run.emits.delete(tracked))
      return sent
    }
  }

  /** Stopped before its tool started (cancelled, lost, closed, or past its deadline): it is not started. */
  const overBeforeStart = () =>
    run.cancelled || run.controller.signal.aborted || (call.deadline_at_ms > 0 && Date.now() >= call.deadline_at_ms)
  const execute = async (): Promise<void> => {
    if (overBeforeStart()) return stopped()
    const tool = owner.toolFor(call.session_id, call.name)
    if (tool === undefined) {
      return post({ error: { code: "unknown_tool", message: `this host has no tool ${JSON.stringify(call.name)} for this session` } })
    }
    const input = await decode(tool.input, call.input)
    if (!input.ok) {
      return post({ error: { code: "invalid_input", message: `the input is not valid: ${describeIssues(input.issues)}`, issues: input.issues } })
    }
    // A cancel may have come while the input was decoded.
    if (overBeforeStart()) return stopped()
    let output: unknown
    try {
      output = await tool.run(input.value, ctx)
    } catch (e) {
      if (run.controller.signal.aborted) return stopped()
      return post({ error: { code: "tool_error", message: describeThrown(e) } })
    }
    if (tool.output === undefined) return post({ ok: output ?? null })
    const encoded = await encode(tool.output, output)
    if (!encoded.ok) {
      return post({ error: { code: "invalid_output", message: `the output is not valid: ${describeIssues(encoded.issues)}`, issues: encoded.issues } })
    }
    return post({ ok: encoded.value ?? null })
  }
  /** The run stopped (or never started): confirm it to Brain's cancel. */
  const stopped = async (): Promise<void> => {
    if (run.cancelled) return post({ stopped: true })
    // Its own deadline came first: Brain's cancel for it follows; `cancel` confirms then.
    run.awaitingCancel = true
  }
  // No way out of a run ends without its result: a failure of the host's own (not the tool's,
  // which `execute` answers) before anything was posted is answered as the tool's error.
  const start = () =>
    void execute().catch((e) =>
      run.settled || run.lost ? undefined : post({ error: { code: "tool_error", message: `the host failed to run the tool: ${describeThrown(e)}` } })
    ).catch(() => undefined).finally(() => {
      if (run.timer !== undefined) clearTimeout(run.timer)
      owner.over(run)
    })
  return { run, start }
}
