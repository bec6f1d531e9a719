/**
 * Host tools: functions in the application's own process that a session's model can call
 * (docs/sdk.md, "Host tools"). `tool({ name, description, input, output, run })` only describes
 * one; a client runs it once a session created with it calls it (Host.ts).
 *
 * - `input` and `output` are Effect Schemas or Standard Schema validators (Validate.ts). The input
 *   is decoded before `run` and the output encoded after it, in the application; either failing is
 *   the tool's error result (`invalid_input`, `invalid_output`), as is a throw (`tool_error`).
 * - The JSON Schema the model is shown is `inputSchema` when given, else derived from `input`
 *   (an Effect Schema always can; a Standard Schema when it offers one). `tool()` throws when there
 *   is none, so that a model is never shown a tool without its parameters.
 */
import { Data } from "effect"
import type { BrainError } from "./Errors.js"
import { type Decoded, type Encodable, isEffectSchema, isValidator, jsonSchemaOf, type Validator } from "./Validate.js"

/** What a running tool is given besides its input. */
export interface ToolContext {
  /**
   * Aborts when Brain cancels the call (the turn was interrupted), at the call's deadline, when
   * the host connection drops (the call's result can no longer be posted), or when the client
   * closes. Its `reason` is a `ToolAborted`. Pass it on (`fetch(url, { signal })`,
   * `child.send(input, { signal })`); `close` does not wait for a tool that ignores it.
   */
  readonly signal: AbortSignal
  /**
   * Commits an Event of this call (`origin: {kind: "tool", sequence}`) and resolves with its
   * sequence once it is durable. The call's result is posted after every emit has settled, so an
   * Event always lands before the call's `tool_call_ended`. Rejects once the call is over, for a
   * reserved kind, or past the turn's BRAIN_MAX_EMITTED_BYTES or BRAIN_MAX_TURN_WRITE_BYTES; it is
   * sent once, never retried.
   */
  readonly emit: (kind: string, payload?: unknown) => Promise<number>
  readonly sessionId: string
  /** The call's name in the session: the sequence of its `tool_call_started`. */
  readonly sequence: number
  /** The model's id for the call. */
  readonly callId: string
  /** Epoch milliseconds when the call's deadline passes (0: none). */
  readonly deadlineAtMs: number
}

export interface ToolOptions<I extends Validator, O extends Validator | undefined> {
  /** The tool's name as the model sees it (unique among a session's tools). */
  readonly name: string
  readonly description?: string
  /** Decodes the model's input before `run`. */
  readonly input: I
  /** Encodes `run`'s result; without it the result is sent as is (it must be JSON). */
  readonly output?: O
  /** The input's JSON Schema for the model, when `input` cannot give one. */
  readonly inputSchema?: object
  /** A deadline shorter than the server's BRAIN_MAX_TOOL_SECS, in milliseconds. */
  readonly timeoutMs?: number
  readonly run: (input: Decoded<I>, ctx: ToolContext) => Promise<OutputOf<O>> | OutputOf<O>
  /**
   * Called once when a result of `run` (`ok` or `error`) was posted but is not known to be the
   * call's recorded outcome, with the reason (`ToolResultUnrecorded.reason`):
   * - `outcome_unrecorded`: Brain took it but could not record the call's outcome (500
   *   `journal_write_failed`, `details.reason: "outcome_unrecorded"`): the call is recorded
   *   unknown (or the server stopped before recording anything), the model is not shown this
   *   result, and a repeat would get the same answer, so nothing is posted again.
   * - `undelivered`: the posting ended without Brain taking it: the command stream dropped or the
   *   client closed while posts still got no answer, or Brain refused it for good (409: the call
   *   is no longer in flight; 401: the host is gone). A post whose answer was lost is posted again
   *   (once more after its stream dropped) and Brain answers the repeat as the first (it
   *   remembers the results it took), so this is not told for it; only an attempt whose answer
   *   was lost with no repeat answered after it (the client closed, the network stayed down), or
   *   one Brain has forgotten since (docs/sdk.md), may have landed: the session's outcome Event of
   *   `sequence` says what Brain recorded.
   * What `run` did stands: reconcile here (log it, compensate).
   */
  readonly onUnrecorded?: (error: ToolResultUnrecorded) => void
}

type OutputOf<O> = O extends Validator ? Encodable<O> : unknown

export interface HostTool {
  readonly _tag: "HostTool"
  readonly name: string
  readonly description: string | undefined
  readonly inputSchema: object
  /** The output's JSON Schema (an Effect Schema's encoded side), declared so the server checks results too. */
  readonly outputSchema: object | undefined
  readonly timeoutMs: number | undefined
  readonly input: Validator
  readonly output: Validator | undefined
  readonly run: (input: unknown, ctx: ToolContext) => unknown
  readonly onUnrecorded: ((error: ToolResultUnrecorded) => void) | undefined
}

/**
 * A host tool's result that is not known to be the call's recorded outcome (`ToolOptions.onUnrecorded`):
 * Brain took it without recording the outcome (500 `journal_write_failed` with `details.reason:
 * "outcome_unrecorded"`), or it could not be delivered.
 */
export class ToolResultUnrecorded extends Data.TaggedError("ToolResultUnrecorded")<{
  readonly message: string
  /** `outcome_unrecorded`: taken, its outcome not recorded; `undelivered`: not taken (ToolOptions.onUnrecorded). */
  readonly reason: "outcome_unrecorded" | "undelivered"
  readonly sessionId: string
  /** The call's name in the session: the sequence of its `tool_call_started`. */
  readonly sequence: number
  /** The server's refusal as the client read it, or the failure of the last attempt to post it. */
  readonly refusal: BrainError
}> {}

/** Why a tool's `ctx.signal` aborted. */
export class ToolAborted extends Data.TaggedError("ToolAborted")<{
  /** `cancel`: Brain cancelled the call; `deadline`: its deadline passed; `connection_lost`: the
   * host connection dropped, so its result can no longer be posted; `closed`: the client closed. */
  readonly reason: "cancel" | "deadline" | "connection_lost" | "closed"
  readonly message: string
}> {}

/** Describes a host tool; pass it in `brain.sessions.create({ tools: [...] })`. */
export const tool = <I extends Validator, O extends Validator | undefined = undefined>(options: ToolOptions<I, O>): HostTool => {
  if (typeof options.name !== "string" || options.name.length === 0) throw new TypeError("tool(): name must be a non-empty string")
  if (!isValidator(options.input)) throw new TypeError(`tool ${options.name}: input must be an Effect Schema (of effect 3, this package's line) or a Standard Schema validator`)
  if (options.output !== undefined && !isValidator(options.output)) {
    throw new TypeError(`tool ${options.name}: output must be an Effect Schema (of effect 3, this package's line) or a Standard Schema validator`)
  }
  const inputSchema = options.inputSchema ?? jsonSchemaOf(options.input)
  if (inputSchema === undefined) {
    throw new TypeError(`tool ${options.name}: its input validator offers no JSON Schema; give one as inputSchema`)
  }
  return {
    _tag: "HostTool",
    name: options.name,
    description: options.description,
    inputSchema,
    // Only an Effect Schema says what its encoding puts on the wire; a Standard Schema's result is checked here alone.
    outputSchema: options.output !== undefined && isEffectSchema(options.output) ? jsonSchemaOf(options.output) : undefined,
    timeoutMs: options.timeoutMs,
    input: options.input,
    output: options.output,
    run: options.run as HostTool["run"],
    onUnrecorded: options.onUnrecorded
  }
}

export const isHostTool = (t: unknown): t is HostTool => typeof t === "object" && t !== null && (t as { _tag?: unknown })._tag === "HostTool"
