/**
 * The ABI's host services (docs/abi.md, `brain.call`) over the runtime's Host: each op's JSON
 * request decoded, the Host service performed (journaled exactly as for an in-process loop), and
 * the answer encoded as `{"ok": value}` or `{"error": {code, message, retryable, ambiguous}}`.
 * A request that is not JSON or not of its op's shape is answered `invalid_request`; nothing of it
 * reaches the journal.
 */
import { Effect, Either, Option, Schema } from "effect"
import { failure, type Failure } from "../../domain/Failure.js"
import { Json, Message, ToolCallRequest } from "../../domain/Messages.js"
import type { Host } from "../../services/Agentloop.js"
import type { ToolServices } from "../../services/WasmHost.js"

const ok = (value: unknown) => JSON.stringify({ ok: value === undefined ? null : value })

export const errorAnswer = (f: Pick<Failure, "code" | "message" | "retryable" | "ambiguous">) =>
  JSON.stringify({ error: { code: f.code, message: f.message, retryable: f.retryable, ambiguous: f.ambiguous } })

const invalid = (message: string) => Effect.succeed(errorAnswer(failure("invalid_request", message)))

const requests = {
  model: Schema.Struct({ messages: Schema.Array(Message), system: Schema.optional(Schema.String), options: Schema.optional(Json) }),
  dispatch: Schema.Struct({ calls: Schema.Array(ToolCallRequest) }),
  emit: Schema.Struct({ kind: Schema.String, payload: Schema.optional(Json) }),
  kv_read: Schema.Struct({ key: Schema.String }),
  kv_put: Schema.Struct({ key: Schema.String, value: Schema.optional(Json) }),
  kv_delete: Schema.Struct({ key: Schema.String }),
  set_transcript: Schema.Struct({ messages: Schema.Array(Message) }),
  events: Schema.Struct({ after: Schema.Int, limit: Schema.Int })
} as const

type Op = keyof typeof requests | "telemetry"

const decoders = Object.fromEntries(
  Object.entries(requests).map(([op, schema]) => [op, Schema.decodeUnknownEither(schema as Schema.Schema<any, any>, { onExcessProperty: "error" })])
) as Record<keyof typeof requests, (u: unknown) => Either.Either<any, unknown>>

const parse = (request: string): Either.Either<unknown, string> => {
  try {
    return Either.right(JSON.parse(request))
  } catch {
    return Either.left("the request is not JSON")
  }
}

/** Runs a Host effect and encodes its value or its failure. */
const answer = <A>(effect: Effect.Effect<A, { readonly failure: Failure }>, encode: (a: A) => unknown = (a) => a) =>
  Effect.match(effect, { onFailure: (e) => errorAnswer(e.failure), onSuccess: (a) => ok(encode(a)) })

/** An Agentloop's host services. */
export const loopServices = (host: Host) => (op: string, request: string): Effect.Effect<string> => {
  const parsed = parse(request)
  if (Either.isLeft(parsed)) return invalid(`${op}: ${parsed.left}`)
  if (op === "telemetry") return Effect.as(host.telemetry(parsed.right), ok(null))
  const decode = decoders[op as keyof typeof requests]
  if (!decode) return invalid(`no host service named ${JSON.stringify(op)} (docs/abi.md lists them)`)
  const decoded = decode(parsed.right)
  if (Either.isLeft(decoded)) return invalid(`${op}: the request does not have the op's shape`)
  const r = decoded.right
  switch (op as Op) {
    case "model":
      return answer(host.model({ messages: r.messages, ...(r.system !== undefined ? { system: r.system } : {}), ...(r.options !== undefined ? { options: r.options } : {}) }))
    case "dispatch":
      return answer(host.dispatch(r.calls))
    case "emit":
      return answer(host.emit(r.kind, r.payload ?? {}), (sequence) => ({ sequence }))
    case "kv_read":
      return answer(host.kvRead(r.key), (found) => (Option.isSome(found) ? { found: true, value: found.value } : { found: false }))
    case "kv_put":
      return answer(host.kvPut(r.key, r.value ?? null), () => null)
    case "kv_delete":
      return answer(host.kvDelete(r.key), () => null)
    case "set_transcript":
      return answer(host.setTranscript(r.messages), () => null)
    case "events":
      return answer(host.events({ after: r.after, limit: r.limit }))
    default:
      return invalid(`no host service named ${JSON.stringify(op)}`)
  }
}

/** A Wasm tool's host services: emit (tool-origin Events) and telemetry. */
export const toolServices = (services: ToolServices) => (op: string, request: string): Effect.Effect<string> => {
  const parsed = parse(request)
  if (Either.isLeft(parsed)) return invalid(`${op}: ${parsed.left}`)
  if (op === "telemetry") return Effect.as(services.telemetry(parsed.right), ok(null))
  if (op !== "emit") return invalid(`a tool may call only emit and telemetry, not ${JSON.stringify(op)}`)
  const decoded = decoders.emit(parsed.right)
  if (Either.isLeft(decoded)) return invalid("emit: the request does not have the op's shape")
  return answer(services.emit(decoded.right.kind, decoded.right.payload ?? {}), (sequence) => ({ sequence }))
}
