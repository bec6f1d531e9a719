/**
 * The ABI's host services (docs/abi.md, `brain.call`) over the runtime's Host: each op's JSON
 * request decoded, the Host service performed (journaled exactly as for an in-process loop), and
 * the answer encoded as `{"ok": value}` or `{"error": {code, message, retryable, ambiguous}}`.
 * A request that is not JSON, nests deeper than MAX_JSON_DEPTH (refused by a scan of the text,
 * before anything parses or walks it) or is not of its op's shape is answered `invalid_request`;
 * nothing of it reaches the journal.
 *
 * `model` and `set_transcript` take the transcript whole (`messages`) or as a delta against the
 * saved transcript (`context: {keep, append}` / `{keep, append}`). The bridge keeps the saved
 * transcript as the activation last saw it (the input's array, then each successful save's) and
 * builds the delta's messages from it: the kept messages are the saved ones themselves, so the
 * Host's diff against the saved transcript is an identity check per kept message, and only
 * `append` is parsed and checked. The Host gets the same messages either way and journals the same
 * records.
 *
 * `model` and `dispatch` may carry a transcript to save with the call (`transcript`, a
 * `set_transcript` request; docs/abi.md, "A save that rides on a call"): checked as that call
 * would check it, against the same saved transcript, and handed to the Host with the call, which
 * writes it in the call's first append; a `model` call's context counts from it. It becomes the
 * base of the next delta when the call answers ok; after an error the base stays as it was.
 *
 * A loop's output may carry the transcript to save (`{"ok", "transcript"}`, docs/abi.md): `save`
 * checks it as that `set_transcript` call would, with the same saved transcript as the delta's base,
 * and hands it to `setTranscriptAtEnd`, so it is committed with the activation's closing records.
 *
 * A loop that exports `brain_model_metadata_unread` (`LoopOptions.modelMetadataUnread`) is given
 * each `model` answer with only the fields the official loop reads (`modelAnswerRead`): what the
 * Host journaled and returned is the same either way; only the answer's text written into the
 * guest is shorter (a provider's usage, ids and stop reasons are 200–300 bytes the guest parses).
 *
 * Messages are checked against the Message schema and passed on as the guest wrote them (the
 * parsed JSON, not a decoded copy): a decoded copy would put their keys in the schema's order, so
 * a guest's records would differ in bytes from an in-process loop's that built the same messages.
 */
import { Data, Effect, Either, Option, ParseResult, Schema } from "effect"
import { appendMessages } from "../../domain/Appended.js"
import { failure, type Failure } from "../../domain/Failure.js"
import { holdsNonFinite, NOT_FINITE, scanJsonText } from "../../domain/JsonText.js"
import { MAX_JSON_DEPTH, PAGE_EVENTS } from "../../domain/Limits.js"
import { Json, Message, ToolCallRequest } from "../../domain/Messages.js"
import type { ModelResult } from "../../domain/Model.js"
import type { Host, HostCallFailed } from "../../services/Agentloop.js"
import type { ToolServices } from "../../services/WasmHost.js"

const ok = (value: unknown) => JSON.stringify({ ok: value === undefined ? null : value })

/** A failure as the ABI's error answer: its code, message, flags, and `details` when it has them (a provider's status, its retry advice). */
export const errorAnswer = (f: Pick<Failure, "code" | "message" | "retryable" | "ambiguous" | "details">) =>
  JSON.stringify({
    error: { code: f.code, message: f.message, retryable: f.retryable, ambiguous: f.ambiguous, ...(f.details !== undefined ? { details: f.details } : {}) }
  })

const invalid = (message: string) => Effect.succeed(errorAnswer(failure("invalid_request", message)))

/** Messages, checked by `isMessages` below: the decoder leaves them as they were parsed. */
const Messages = Schema.Array(Schema.Unknown)

/** `{keep, append}`: the saved transcript's first `keep` messages, then `append` (`keep` checked against it later). */
const Delta = Schema.Struct({ keep: Schema.Int, append: Messages })

/** The ops whose requests are checked by a Schema (their own shape, unknown fields refused); `model` and `set_transcript` are checked by hand below. */
const requests = {
  dispatch: Schema.Struct({ calls: Schema.Array(ToolCallRequest), transcript: Schema.optional(Schema.Unknown) }),
  emit: Schema.Struct({ kind: Schema.String, payload: Schema.optional(Json) }),
  kv_read: Schema.Struct({ key: Schema.String }),
  kv_put: Schema.Struct({ key: Schema.String, value: Schema.optional(Json) }),
  kv_delete: Schema.Struct({ key: Schema.String }),
  // Any number: brought to the nearest page (docs/abi.md, "Host services").
  events: Schema.Struct({ after: Schema.Number, limit: Schema.Number }),
  transcript: Schema.Struct({ from: Schema.Int, to: Schema.Int })
} as const

type Op = keyof typeof requests | "model" | "set_transcript" | "telemetry"

const decoders = Object.fromEntries(
  Object.entries(requests).map(([op, schema]) => [op, Schema.decodeUnknownEither(schema as Schema.Schema<any, any>, { onExcessProperty: "error" })])
) as Record<keyof typeof requests, (u: unknown) => Either.Either<any, unknown>>

/** Characters of a shape problem's text at most: its "actual" value may be a whole request. */
const SHAPE_PROBLEM_CHARS = 300

/**
 * Why `u` is not of `schema`'s shape, for an author: its first issue's field (`calls[0].id`, the
 * request itself when it has no path) and what is wrong there. Only on the refusal's path.
 */
const shapeProblem = (schema: Schema.Schema<any, any>, u: unknown): string => {
  const decoded = Schema.decodeUnknownEither(schema, { onExcessProperty: "error" })(u)
  if (Either.isRight(decoded)) return "the request"
  const issue = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)[0]
  if (issue === undefined) return "the request"
  let where = ""
  for (const key of issue.path) where += typeof key === "number" ? `[${key}]` : `${where === "" ? "" : "."}${String(key)}`
  const text = where === "" ? `the request: ${issue.message}` : issue.message.startsWith("is ") ? `${where} ${issue.message}` : `${where}: ${issue.message}`
  return text.length > SHAPE_PROBLEM_CHARS ? `${text.slice(0, SHAPE_PROBLEM_CHARS)}…` : text
}

/** The answer to a request of `op` that is not of `schema`'s shape. */
const misshapen = (op: string, schema: Schema.Schema<any, any>, u: unknown) => invalid(`${op}: the request does not have the op's shape: ${shapeProblem(schema, u)}`)

/**
 * Why a decoded `dispatch` request's calls cannot run, or undefined: a call without `input` (which
 * the Schema's `Json` lets through), and calls sharing an id, whose results `call_id` could not tell apart.
 */
const dispatchProblem = (calls: ReadonlyArray<{ readonly id: string }>): string | undefined => {
  const seen = new Map<string, number>()
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]!
    if (!Object.hasOwn(call, "input")) return `dispatch: the request does not have the op's shape: calls[${i}].input is missing (give null for a call without input)`
    const first = seen.get(call.id)
    if (first !== undefined) {
      return `dispatch: calls[${first}] and calls[${i}] have the same id ${JSON.stringify(call.id)}: each call needs an id of its own (its result is told apart by call_id)`
    }
    seen.set(call.id, i)
  }
  return undefined
}

/**
 * The two requests of every turn, `model` and `set_transcript` (and the output's transcript),
 * checked by hand: the same shapes as these Schemas, decoded with unknown fields refused, without
 * a Schema's decoding on the path of each call. A test holds them to the Schemas.
 */
export const ModelRequest = Schema.Struct({
  messages: Schema.optional(Messages),
  context: Schema.optional(Delta),
  system: Schema.optional(Schema.String),
  options: Schema.optional(Json),
  transcript: Schema.optional(Schema.Unknown)
})
export const SetTranscriptRequest = Schema.Struct({
  messages: Schema.optional(Messages),
  keep: Schema.optional(Schema.Int),
  append: Schema.optional(Messages)
})
type ModelRequest = typeof ModelRequest.Type
type SetTranscriptRequest = typeof SetTranscriptRequest.Type

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)
const isInt = (u: unknown): u is number => Number.isSafeInteger(u)

const ROLES: ReadonlySet<unknown> = new Set(Message.fields.role.literals)

const isToolCall = (u: unknown): boolean => {
  if (!isObject(u) || typeof u.id !== "string" || typeof u.name !== "string" || !Object.hasOwn(u, "input")) return false
  for (const key in u) if (key !== "id" && key !== "name" && key !== "input") return false
  return true
}

/** A Message (its Schema, unknown fields refused), checked by hand: two of these run on every text turn. */
export const isMessage = (u: unknown): u is Message => {
  if (!isObject(u)) return false
  for (const key in u) if (key !== "role" && key !== "content" && key !== "tool_calls" && key !== "tool_call_id") return false
  if (!ROLES.has(u.role)) return false
  const content = u.content
  if (typeof content !== "string") {
    if (!Array.isArray(content)) return false
    for (const part of content) if (!isObject(part) || typeof part.type !== "string") return false
  }
  if (u.tool_calls !== undefined && !(Array.isArray(u.tool_calls) && u.tool_calls.every(isToolCall))) return false
  return u.tool_call_id === undefined || typeof u.tool_call_id === "string"
}

const isMessages = (u: ReadonlyArray<unknown>): u is ReadonlyArray<Message> => u.every(isMessage)

/** `u` as a `model` request (ModelRequest), or undefined when it is not one. */
export const asModelRequest = (u: unknown): ModelRequest | undefined => {
  if (!isObject(u)) return undefined
  for (const key in u) if (key !== "messages" && key !== "context" && key !== "system" && key !== "options" && key !== "transcript") return undefined
  if (u.messages !== undefined && !Array.isArray(u.messages)) return undefined
  if (u.system !== undefined && typeof u.system !== "string") return undefined
  const context = u.context
  if (context !== undefined) {
    if (!isObject(context)) return undefined
    for (const key in context) if (key !== "keep" && key !== "append") return undefined
    if (!isInt(context.keep) || !Array.isArray(context.append)) return undefined
  }
  return u as ModelRequest
}

/** `u` as a `set_transcript` request (SetTranscriptRequest), or undefined when it is not one. */
export const asSetTranscriptRequest = (u: unknown): SetTranscriptRequest | undefined => {
  if (!isObject(u)) return undefined
  for (const key in u) if (key !== "messages" && key !== "keep" && key !== "append") return undefined
  if (u.messages !== undefined && !Array.isArray(u.messages)) return undefined
  if (u.keep !== undefined && !isInt(u.keep)) return undefined
  if (u.append !== undefined && !Array.isArray(u.append)) return undefined
  return u as SetTranscriptRequest
}

const parse = (request: string): Either.Either<unknown, string> => {
  const scan = scanJsonText(request)
  if (scan.depth > MAX_JSON_DEPTH) return Either.left(`the request nests deeper than ${MAX_JSON_DEPTH} levels`)
  let value: unknown
  try {
    value = JSON.parse(request)
  } catch {
    return Either.left("the request is not JSON")
  }
  // Refused, not changed: JSON.parse makes such a number Infinity, which JSON writes as null.
  return scan.mayOverflow && holdsNonFinite(value) ? Either.left(NOT_FINITE) : Either.right(value)
}

/**
 * Runs a Host effect and encodes its value or its failure; `answered` runs when it answered ok,
 * before its answer is encoded (in the same step: a save's base moves with no step of its own).
 */
const answer = <A>(effect: Effect.Effect<A, { readonly failure: Failure }>, encode: (a: A) => unknown = (a) => a, answered?: () => void) =>
  Effect.match(effect, {
    onFailure: (e) => errorAnswer(e.failure),
    onSuccess: (a) => {
      answered?.()
      return ok(encode(a))
    }
  })

/**
 * The transcript a delta names: `saved`'s first `keep` messages (the same objects) then `append`,
 * or why the delta is not valid against `saved`.
 */
const expand = (saved: ReadonlyArray<Message>, keep: number, append: ReadonlyArray<unknown>): Either.Either<ReadonlyArray<Message>, string> =>
  keep < 0 || keep > saved.length
    ? Either.left(`keep must be between 0 and the saved transcript's length (${saved.length}), not ${keep}`)
    : !isMessages(append)
    ? Either.left("append is not an array of messages")
    : Either.right(
      keep === 0
        ? append
        : keep === saved.length
        ? appendMessages(saved, append)
        : saved.slice(0, keep).concat(append)
    )

/** The whole form's messages, checked. */
const whole = (messages: ReadonlyArray<unknown>): Either.Either<ReadonlyArray<Message>, string> =>
  isMessages(messages) ? Either.right(messages) : Either.left("messages is not an array of messages")

/** The output's transcript was refused as `set_transcript` would refuse it (`invalid_request`); `reason` says why. */
export class TranscriptRefused extends Data.TaggedError("TranscriptRefused")<{ readonly reason: string }> {}

/**
 * An Agentloop's host services: `perform` (the function itself) answers `brain.call`; `save` saves
 * the transcript a loop's output carries (docs/abi.md, "The entries") as a `set_transcript` call
 * with that request would, against the same saved transcript, but with the activation's end
 * (`Host.setTranscriptAtEnd`): in the closing append, not a commit of its own.
 */
export interface LoopServices {
  (op: string, request: string): Effect.Effect<string>
  /** `set_transcript` with `request` (parsed JSON): refused (`TranscriptRefused`) or failed (the Host's failure) as that call would answer. */
  readonly save: (request: unknown) => Effect.Effect<void, TranscriptRefused | HostCallFailed>
}

/** What an Agentloop's module said at admission about what it reads (AdmittedModule). */
export interface LoopOptions {
  /** It exports `brain_model_metadata_unread`: its `model` answers carry only `modelAnswerRead`'s fields. */
  readonly modelMetadataUnread?: boolean
}

/**
 * A model's answer as a loop that exports `brain_model_metadata_unread` is given it: `text`,
 * `tool_calls`, and `reasoning` when the model gave any (docs/abi.md, "Host services"); not
 * `stop_reason`, `usage`, `response_id`, `model`, `provider_stop_reason`, nor any field added later.
 */
export const modelAnswerRead = (result: ModelResult): unknown =>
  result.reasoning !== undefined
    ? { text: result.text, tool_calls: result.tool_calls, reasoning: result.reasoning }
    : { text: result.text, tool_calls: result.tool_calls }

/**
 * An Agentloop's host services. `transcript` is the activation input's transcript (the session's
 * saved one, the Host's own array): the base of a delta `model` or `set_transcript` until the
 * guest's first successful save.
 */
export const loopServices = (host: Host, transcript: ReadonlyArray<Message>, options: LoopOptions = {}): LoopServices => {
  /** How a `model` answer is encoded for this loop: whole, or only what it reads. */
  const modelAnswer = options.modelMetadataUnread === true ? modelAnswerRead : undefined
  /** The saved transcript as this activation last saw it: the input's, then what its last successful save saved. */
  let saved = transcript
  /** The transcript a decoded `set_transcript` request names, or why it is refused. */
  const saveOf = (r: SetTranscriptRequest): Either.Either<ReadonlyArray<Message>, string> => {
    const delta = r.keep !== undefined || r.append !== undefined
    if (delta === (r.messages !== undefined) || (delta && (r.keep === undefined || r.append === undefined))) {
      return Either.left("give either messages, or keep and append")
    }
    return delta ? expand(saved, r.keep!, r.append!) : whole(r.messages!)
  }
  /** A decoded `set_transcript` request: the transcript it saves and its save, or why it is refused. */
  const setTranscript = (
    r: SetTranscriptRequest,
    through: Host["setTranscript"] = host.setTranscript
  ): Either.Either<{ readonly next: ReadonlyArray<Message>; readonly save: Effect.Effect<void, HostCallFailed> }, string> =>
    Either.map(saveOf(r), (next) => ({ next, save: through(next) }))
  /**
   * The transcript a `model` or `dispatch` request carries to save with the call (its
   * `transcript`, a `set_transcript` request): undefined when it carries none, or why it is refused.
   */
  const ridingOf = (u: unknown): Either.Either<ReadonlyArray<Message> | undefined, string> => {
    if (u === undefined) return Either.right(undefined)
    const r = asSetTranscriptRequest(u)
    if (r === undefined) return Either.left("transcript: it does not have set_transcript's shape")
    return Either.mapLeft(saveOf(r), (why) => `transcript: ${why}`)
  }
  /** Once the call answered ok, the transcript it carried is the saved one (an error leaves the last one, docs/abi.md). */
  const savedAs = (save: ReadonlyArray<Message> | undefined): (() => void) | undefined => save === undefined ? undefined : () => void (saved = save)
  const perform = (op: string, request: string): Effect.Effect<string> => {
    // After a cancel every call answers it, those the Host does not perform too (docs/abi.md).
    const refused = host.refusal()
    if (refused !== undefined) return Effect.succeed(errorAnswer(refused))
    const parsed = parse(request)
    if (Either.isLeft(parsed)) return invalid(`${op}: ${parsed.left}`)
    switch (op as Op) {
      case "model": {
        const r = asModelRequest(parsed.right)
        if (r === undefined) return misshapen("model", ModelRequest, parsed.right)
        if ((r.messages === undefined) === (r.context === undefined)) return invalid("model: give exactly one of messages and context")
        const save = ridingOf(r.transcript)
        if (Either.isLeft(save)) return invalid(`model: ${save.left}`)
        // The context counts from the transcript as the save riding on the call leaves it.
        const base = save.right ?? saved
        const messages: Either.Either<ReadonlyArray<Message>, string> = r.context !== undefined
          ? expand(base, r.context.keep, r.context.append)
          : whole(r.messages!)
        if (Either.isLeft(messages)) return invalid(`model: ${messages.left}`)
        return answer(
          host.model({
            messages: messages.right,
            ...(r.system !== undefined ? { system: r.system } : {}),
            ...(r.options !== undefined ? { options: r.options } : {})
          }, save.right),
          modelAnswer,
          savedAs(save.right)
        )
      }
      case "set_transcript": {
        const r = asSetTranscriptRequest(parsed.right)
        if (r === undefined) return misshapen("set_transcript", SetTranscriptRequest, parsed.right)
        const save = setTranscript(r)
        if (Either.isLeft(save)) return invalid(`set_transcript: ${save.left}`)
        const { next } = save.right
        return answer(save.right.save, () => null, () => void (saved = next))
      }
      case "telemetry":
        return Effect.as(host.telemetry(parsed.right), ok(null))
    }
    const decode = Object.hasOwn(decoders, op) ? decoders[op as keyof typeof requests] : undefined
    if (!decode) return invalid(`no host service named ${JSON.stringify(op)} (docs/abi.md lists them)`)
    const decoded = decode(parsed.right)
    if (Either.isLeft(decoded)) return misshapen(op, requests[op as keyof typeof requests], parsed.right)
    const r = decoded.right
    switch (op as keyof typeof requests) {
      case "dispatch": {
        // The calls as the guest wrote them: the decoded copy has every field of the Schema's.
        const problem = dispatchProblem((parsed.right as { readonly calls: ReadonlyArray<{ readonly id: string }> }).calls)
        if (problem !== undefined) return invalid(problem)
        const save = ridingOf(r.transcript)
        if (Either.isLeft(save)) return invalid(`dispatch: ${save.left}`)
        return answer(host.dispatch(r.calls, save.right), undefined, savedAs(save.right))
      }
      case "emit":
        return answer(host.emit(r.kind, r.payload ?? {}), (sequence) => ({ sequence }))
      case "kv_read":
        return answer(host.kvRead(r.key), (found) => (Option.isSome(found) ? { found: true, value: found.value } : { found: false }))
      case "kv_put":
        return answer(host.kvPut(r.key, r.value ?? null), () => null)
      case "kv_delete":
        return answer(host.kvDelete(r.key), () => null)
      case "events":
        return answer(host.events({ after: Math.max(0, Math.floor(r.after)), limit: Math.max(1, Math.min(Math.floor(r.limit), PAGE_EVENTS)) }))
      case "transcript":
        // The saved transcript as this activation last saw it, from `from` up to `to` (excluded).
        return 0 <= r.from && r.from <= r.to && r.to <= saved.length
          ? Effect.succeed(ok(saved.slice(r.from, r.to)))
          : invalid(`transcript: give 0 <= from <= to <= ${saved.length} (the saved transcript's length), not from ${r.from} to ${r.to}`)
      default:
        return invalid(`no host service named ${JSON.stringify(op)}`)
    }
  }
  const save = (request: unknown): Effect.Effect<void, TranscriptRefused | HostCallFailed> => {
    const decoded = asSetTranscriptRequest(request)
    if (decoded === undefined) return Effect.fail(new TranscriptRefused({ reason: "it does not have set_transcript's shape" }))
    // The output's transcript rides on the activation's closing append (Host.setTranscriptAtEnd).
    // The activation has ended: no later call counts a delta from it, so the base is left as it is.
    const saving = setTranscript(decoded, host.setTranscriptAtEnd)
    return Either.isLeft(saving) ? Effect.fail(new TranscriptRefused({ reason: saving.left })) : saving.right.save
  }
  return Object.assign(perform, { save })
}

/** A Wasm tool's host services: emit (tool-origin Events) and telemetry. */
export const toolServices = (services: ToolServices) => (op: string, request: string): Effect.Effect<string> => {
  const refused = services.refusal?.()
  if (refused !== undefined) return Effect.succeed(errorAnswer(refused))
  const parsed = parse(request)
  if (Either.isLeft(parsed)) return invalid(`${op}: ${parsed.left}`)
  if (op === "telemetry") return Effect.as(services.telemetry(parsed.right), ok(null))
  if (op !== "emit") return invalid(`a tool may call only emit and telemetry, not ${JSON.stringify(op)}`)
  const decoded = decoders.emit(parsed.right)
  if (Either.isLeft(decoded)) return misshapen("emit", requests.emit, parsed.right)
  return answer(services.emit(decoded.right.kind, decoded.right.payload ?? {}), (sequence) => ({ sequence }))
}
