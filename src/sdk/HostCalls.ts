/**
 * One call a host runs (Host.ts takes it from the command stream):
 *
 * - A run decodes the input, runs the tool, encodes its output and posts one result: `ok`, or
 *   `error` with `code` `invalid_input` / `tool_error` / `invalid_output` / `unknown_tool`. Its
 *   Events are posted first: the result waits until every `emit` has been answered. A result the
 *   server refuses (too large) is answered once more, so that the call does not wait for its
 *   deadline: an output as the error `invalid_output`, an error cut down to its code and the
 *   start of its message (REFUSED_ERROR_MESSAGE_CHARS). A result taken whose outcome Brain could
 *   not record (`outcome_unrecorded`) is posted no more (a repeat would be refused) and told to
 *   the tool's `onUnrecorded` as a `ToolResultUnrecorded`.
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
import type * as Schemas from "../http/Schemas.js"
import { BrainError, isOutcomeUnrecorded } from "./Errors.js"
import { type HostTool, ToolAborted, type ToolContext, ToolResultUnrecorded } from "./Tool.js"
import type { Transport } from "./Transport.js"
import { decode, describeIssues, encode } from "./Validate.js"

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
  /** A cancel command arrived for it. */
  cancelled: boolean
  /** Its stream is over (or the client closed): nothing may be posted for it any more. */
  lost: boolean
  /** It stopped on its own deadline and waits for Brain's cancel to confirm the stop to. */
  awaitingCancel: boolean
  /** The result is being posted: later emits are refused. */
  settled: boolean
  readonly emits: Set<Promise<unknown>>
  timer: ReturnType<typeof setTimeout> | undefined
}

export type HostResult = typeof Schemas.HostResult.Type

/** A call's name on the wire (the session id is the server's own, as it sent it). */
export const callOf = (c: { readonly session_id: string; readonly sequence: number }) => ({
  session_id: c.session_id as SessionId,
  sequence: c.sequence
})

const errorMessage = (e: unknown) => (e instanceof Error ? e.message : String(e))

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

/** `run` is over for the host (its stream dropped, or the client closed): its signal aborts and nothing is posted for it. */
export const lose = (run: Run, reason: ToolAborted["reason"], message: string) => {
  run.lost = true
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
  /** Posts one result of the run (HostResults.ts); rejects with its refusal. */
  readonly postResult: (result: HostResult, run: Run) => Promise<void>
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
    cancelled: false,
    lost: false,
    awaitingCancel: false,
    settled: false,
    emits: new Set(),
    timer: undefined
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
    try {
      await owner.postResult({ ...callOf(call), ...answer } as HostResult, run)
    } catch (e) {
      // A result the server refuses (too large, not JSON) leaves the call in flight: answer it
      // once more, with a result it takes — an output as the error `invalid_output`, an error cut
      // down to its code and the start of its message — or the call would wait for its deadline
      // and end `timeout`, ambiguous. A 409 means it is over already (an earlier attempt of
      // this very post landed, or its stream closed); a closed client posts nothing.
      // Taken, but its outcome could not be recorded: a repeat would be refused; the tool is told.
      if (isOutcomeUnrecorded(e)) return unrecorded(e)
      if (replacing || !(e instanceof BrainError) || e.status === 409 || e.code === "network_error") return
      if ("ok" in answer) {
        await post({ error: { code: "invalid_output", message: `the server refused the output: ${e.message}` } }, true)
      } else if ("error" in answer) {
        await post({ error: boundedError(answer.error, e) }, true)
      }
    }
  }
  const unrecorded = (refusal: BrainError) => {
    const tool = owner.toolFor(call.session_id, call.name)
    const error = new ToolResultUnrecorded({
      message: `Brain took the result of ${call.name} (${call.session_id}/${call.sequence}) but could not record the call's outcome: ${refusal.message}`,
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
      return post({ error: { code: "tool_error", message: errorMessage(e) } })
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
  const start = () =>
    void execute().catch(() => undefined).finally(() => {
      if (run.timer !== undefined) clearTimeout(run.timer)
      owner.over(run)
    })
  return { run, start }
}
