/**
 * What a tool call comes to (its verdict) and the record that says so: the outcome the fence
 * commits and the loop is shown exactly; what a call comes to before anything is sent; and how a
 * call is stopped when the turn's cancel or its own deadline comes first (ToolCalls.ts, RemoteNow.ts).
 */
import { Cause, Duration, Effect, Exit, Fiber, Option } from "effect"
import { interruptWithin } from "./Abandon.js"
import type { AdmittedEnvironment } from "../../domain/Environment.js"
import { boundedFailure, boundedMessage, failure, type Failure, type FailureCode } from "../../domain/Failure.js"
import { isJsonData, nestingDepth } from "../../domain/JsonText.js"
import { MAX_JSON_DEPTH, MAX_PAYLOAD_BYTES } from "../../domain/Limits.js"
import type { SessionConfiguration } from "../../domain/Configuration.js"
import type { ToolCallRequest } from "../../domain/Messages.js"
import { entry, writtenEntry } from "../../domain/Records.js"
import type { ServerConfigShape } from "../../services/ServerConfig.js"
import type { ToolReply } from "../../services/Tools.js"
import type { CallStop } from "../CallStop.js"
import type { CancelReason } from "./Cell.js"
import type { ToolCallContext } from "./ToolCalls.js"
import { cancelFailure } from "./HostFailures.js"
import { checkAgainst } from "./ToolSchemas.js"
import type { Deadline } from "./Deadline.js"

export type ToolDefinition = NonNullable<SessionConfiguration["tools"]>[number]

export type ToolVerdict =
  | { readonly _tag: "reply"; readonly reply: ToolReply }
  /** Never sent: the turn was cancelled (`reason`), or the call's own deadline had passed (`deadline`). */
  | { readonly _tag: "unsent"; readonly reason: CancelReason; readonly deadline?: true }
  | { readonly _tag: "lost"; readonly message: string }
  /**
   * An Environment's failure: `error` when the call did not run, `unknown` when it may have; or
   * an executor that threw or died (`crashed`): `error`, `tool_failed`, since it is over.
   */
  | { readonly _tag: "failed"; readonly outcome: "error" | "unknown"; readonly failure: Failure }
  | { readonly _tag: "stopped"; readonly by: "cancel" | "deadline"; readonly confirmed: boolean; readonly reason: CancelReason }

/**
 * An executor that threw or died (a defect: an in-process tool's bug) failed: nothing was cancelled
 * and nothing of it runs any more, so the call is the tool's failure, `tool_failed`, not
 * ambiguous, with what it threw (bounded).
 */
export const crashed = (defect: unknown): ToolVerdict => {
  const text = defect instanceof Error ? `${defect.name}: ${defect.message}` : typeof defect === "string" ? defect : safeText(defect)
  return { _tag: "failed", outcome: "error", failure: failure("tool_failed", boundedMessage(`the tool threw: ${text}`)) }
}

const safeText = (value: unknown): string => {
  try {
    return String(value)
  } catch {
    return "a value that cannot be shown"
  }
}

/**
 * A host tool's `ok` output that breaks its declared `output_schema` becomes the error
 * `invalid_output`; one its schema cannot check (a schema an older create admitted that cannot be
 * compiled) the error `invalid_schema`: never taken unchecked.
 */
export const checked = (v: ToolVerdict, schema: unknown): ToolVerdict => {
  if (schema === undefined || v._tag !== "reply" || v.reply.outcome !== "ok") return v
  const check = checkAgainst(schema, v.reply.output)
  if (check._tag === "conforms") return v
  if (check._tag === "unusable") {
    return { _tag: "reply", reply: { outcome: "error", output: { code: "invalid_schema", message: `the output cannot be checked: the tool's output_schema ${check.reason}` } } }
  }
  const shown = check.issues.map((i) => `${i.path.length > 0 ? i.path.join(".") : "(output)"}: ${i.message}`).join("; ")
  return { _tag: "reply", reply: { outcome: "error", output: { code: "invalid_output", message: `the output is not valid: ${shown}`, issues: check.issues } } }
}

export const checkedOutput = (verdict: Effect.Effect<ToolVerdict>, schema: unknown): Effect.Effect<ToolVerdict> =>
  schema === undefined ? verdict : Effect.map(verdict, (v) => checked(v, schema))

/**
 * A tool's outcome record, written as JSON once: its text, which the journal then writes as it is
 * (`writtenEntry`), or why JSON cannot write the output (a cycle, a BigInt, nesting past
 * MAX_JSON_DEPTH or the engine's stack): an in-process tool answers with any value, and its
 * outcome record must still be written. Plain code, like the journal's encoder.
 */
const writtenOutcome = (payload: { readonly output: unknown }): { readonly json: string } | { readonly unwritable: string } => {
  let json: string
  try {
    json = JSON.stringify(payload)
  } catch (e) {
    return { unwritable: (e instanceof Error ? e.message : String(e)).split("\n")[0]! }
  }
  // The output nests one level below the payload (its other members are scalars).
  if (nestingDepth(json) > MAX_JSON_DEPTH + 1) return { unwritable: `it nests deeper than ${MAX_JSON_DEPTH} levels` }
  // A JSON text longer than a frame takes (its escaping can make 6 bytes of one: a NUL) is not
  // written either; one comparison for an ordinary output (a UTF-16 unit is at most 3 bytes).
  if (json.length * 3 > MAX_PAYLOAD_BYTES) {
    const bytes = Buffer.byteLength(json, "utf8")
    if (bytes > MAX_PAYLOAD_BYTES) return { unwritable: `it is ${bytes} bytes as JSON, above the ${MAX_PAYLOAD_BYTES} one journal record takes` }
  }
  return { json }
}

/**
 * The record of a call's outcome: what the fence commits, and exactly what the loop is shown. A
 * failure of a call in an Environment (`environment`) names it in `details.environment`, as the
 * Environment's own failures do, when Brain writes it itself (a deadline, a cancel, a lost call).
 */
export const toolOutcome = (
  sequence: number,
  exit: Exit.Exit<ToolVerdict>,
  dispatched: boolean,
  budget: number | undefined,
  environment?: string | undefined
) => {
  const named = environment === undefined ? {} : { details: { environment } }
  const failed = (code: FailureCode, message: string, options: { readonly ambiguous?: boolean } = {}) =>
    failure(code, message, { ...options, ...named })
  // Only an interruption is a stop; a dispatch that died (and was not interrupted) failed.
  const v: ToolVerdict = Exit.isSuccess(exit)
    ? exit.value
    : Exit.isInterrupted(exit)
    ? { _tag: "stopped", by: "cancel", confirmed: !dispatched, reason: "interrupted" }
    : crashed(Cause.squash(exit.cause))
  if (v._tag === "reply" && v.reply.outcome !== "stopped") {
    const payload = { sequence, outcome: v.reply.outcome, output: v.reply.output ?? null, is_error: v.reply.outcome === "error" }
    const written = writtenOutcome(payload)
    if ("json" in written) {
      // The loop is shown what the journal records: an output that JSON writes other than as it
      // is (an in-process tool's Date, function, undefined member or NaN) is read back from the text.
      return writtenEntry("tool_call_ended", isJsonData(payload.output) ? payload : JSON.parse(written.json), written.json)
    }
    // An output the journal cannot write would leave the call's start unclosed: it is the error.
    return entry("tool_call_ended", {
      sequence,
      outcome: "error",
      output: { code: "invalid_output", message: `the tool's output cannot be written as JSON: ${written.unwritable}` },
      is_error: true
    })
  }
  if (v._tag === "unsent" && v.deadline) {
    return entry("tool_call_failed", {
      sequence,
      outcome: "timeout",
      failure: failed("timeout", `the tool call's deadline of ${budget} ms passed before it was sent; the call was not sent`),
      is_error: true
    })
  }
  if (v._tag === "unsent") {
    return entry("tool_call_failed", {
      sequence,
      outcome: v.reason === "timeout" ? "timeout" : "cancelled",
      failure: { ...cancelFailure(v.reason), message: `${cancelFailure(v.reason).message}; the call was not sent`, ...named },
      is_error: true
    })
  }
  if (v._tag === "failed") {
    // An Environment's failure may carry its text (a message, a body as details): bounded.
    return entry("tool_call_failed", { sequence, outcome: v.outcome, failure: boundedFailure(v.failure), is_error: true })
  }
  if (v._tag === "lost") {
    return entry("tool_call_failed", {
      sequence,
      outcome: "unknown",
      failure: failed("unknown", boundedMessage(v.message), { ambiguous: true }),
      is_error: true
    })
  }
  if (v._tag === "stopped" && v.by === "deadline") {
    return entry("tool_call_failed", {
      sequence,
      outcome: "timeout",
      failure: failed("timeout", `the tool call passed its deadline of ${budget} ms`, { ambiguous: !v.confirmed }),
      is_error: true
    })
  }
  const confirmed = v._tag === "stopped" ? v.confirmed : true
  return entry("tool_call_failed", {
    sequence,
    outcome: confirmed ? "cancelled" : "unknown",
    failure: confirmed
      ? failed("cancelled", "the tool call was cancelled", { ambiguous: true })
      : failed("unknown", "the tool call was cancelled and the executor did not confirm it stopped", { ambiguous: true }),
    is_error: true
  })
}

/**
 * What a call comes to before anything is sent: the turn's cancel that came while its start was
 * committed, its deadline passed meanwhile, or (for a host tool) an input that breaks its declared
 * schema (or one its schema cannot check), which is answered here; undefined when it is to be sent.
 */
export const notSentOf = (
  ctx: ToolCallContext,
  call: ToolCallRequest,
  definition: ToolDefinition | undefined,
  deadline: Deadline | undefined,
  remote: AdmittedEnvironment | undefined
): ToolVerdict | undefined => {
  const early = ctx.scope.signal.reason
  if (early !== undefined) return { _tag: "unsent", reason: early }
  const ended = deadline?.unsafePoll()
  if (ended != null && Exit.isSuccess(ended)) return { _tag: "unsent", reason: "timeout", deadline: true }
  if (remote?.driver !== "host") return undefined
  const check = checkAgainst(definition?.input_schema, call.input ?? null)
  if (check._tag === "conforms") return undefined
  if (check._tag === "unusable") {
    return { _tag: "reply", reply: { outcome: "error", output: { code: "invalid_schema", message: `the input cannot be checked, and was not sent: the tool's input_schema ${check.reason}` } } }
  }
  const shown = check.issues.map((i) => `${i.path.length > 0 ? i.path.join(".") : "(input)"}: ${i.message}`).join("; ")
  return { _tag: "reply", reply: { outcome: "error", output: { code: "invalid_input", message: `the input is not valid: ${shown}`, issues: check.issues } } }
}

/**
 * The call's deadline or the turn's cancel came before its executor's verdict: the call is
 * stopped (`stop`, which its executor hears), given the grace to end, and what it came to is the
 * verdict: its own answer if it finished anyway, else stopped, confirmed or not.
 */
export function* stopping(
  config: ServerConfigShape,
  first: { readonly _tag: "cancel"; readonly reason: CancelReason } | { readonly _tag: "deadline" },
  executor: Fiber.RuntimeFiber<ToolVerdict>,
  stop: CallStop,
  stoppedBy: (by: "cancel" | "deadline") => void
) {
  const by = first._tag === "deadline" ? "deadline" : "cancel"
  const reason: CancelReason = first._tag === "cancel" ? first.reason : "timeout"
  stoppedBy(by)
  stop.abort(by === "deadline" ? "timeout" : reason)
  // An interruptible wait, so that its deadline holds when the stop runs uninterruptibly (`dispatchOf`).
  const after = yield* Effect.interruptible(Fiber.await(executor)).pipe(Effect.timeoutOption(Duration.millis(config.cancelGraceMs)))
  if (Option.isSome(after)) {
    // Stopped before its work began (a Wasm tool still waiting for a thread): it never ran.
    if (stop.neverStarted) return { _tag: "unsent", reason, ...(by === "deadline" ? { deadline: true } : {}) } as ToolVerdict
    const ended = after.value
    if (Exit.isSuccess(ended) && ended.value._tag === "reply" && ended.value.reply.outcome !== "stopped") {
      return ended.value // It finished anyway: record what really happened.
    }
    // An executor may confirm it stopped by ending interrupted after the abort (a Wasm tool:
    // services/Tools.ts); one that died failed.
    if (Exit.isFailure(ended) && !Exit.isInterrupted(ended)) return crashed(Cause.squash(ended.cause))
  }
  // Interrupted, it has the grace again, no more: one still running is abandoned (Abandon.ts).
  if (Option.isNone(after)) yield* interruptWithin(executor, config.cancelGraceMs)
  return { _tag: "stopped", by, confirmed: Option.isSome(after), reason } as ToolVerdict
}
