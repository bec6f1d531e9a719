/**
 * The wire shapes of the HTTP API. Every request schema rejects unknown fields.
 */
import { type ParseResult, Schema } from "effect"
import { IdleTtlMs, ModelChoice, ToolDeclaration } from "../domain/Configuration.js"
import { EnvironmentDeclaration } from "../domain/Environment.js"
import { FailureCode } from "../domain/Failure.js"
import { HostId, SessionId } from "../domain/Ids.js"
import { HOST_RESULTS_BATCH, IDEMPOTENCY_KEY_MAX_BYTES, LIST_PAGE_SESSIONS, PAGE_EVENTS } from "../domain/Limits.js"
import { Json, Message, TurnInput } from "../domain/Messages.js"
import { Origin } from "../domain/Records.js"

const strict = { parseOptions: { onExcessProperty: "error" as const } }

/**
 * The shape of every non-2xx body, whatever its code. The contract declares one schema per code
 * (ApiErrors.ts), each encoding to this shape with a literal `code`.
 */
export const ErrorBody = Schema.Struct({
  code: FailureCode,
  message: Schema.String,
  retryable: Schema.Boolean,
  details: Schema.optional(Json)
}).annotations({ identifier: "Error", description: "Every non-2xx answer" })
export type ErrorBody = typeof ErrorBody.Type

export const CreateSessionRequest = Schema.Struct({
  agentloop: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128))),
  model: ModelChoice,
  system: Schema.optional(Schema.String),
  tools: Schema.optional(Schema.Array(ToolDeclaration)),
  environments: Schema.optional(Schema.Array(EnvironmentDeclaration)),
  transcript: Schema.optional(Schema.Array(Message)),
  idle_ttl_ms: Schema.optional(IdleTtlMs)
}).annotations({ identifier: "CreateSession", ...strict })

export const SessionStatus = Schema.Literal("creating", "idle", "running", "ending", "ended", "failed", "corrupt").annotations({
  description: "`corrupt` appears only in lists: the session's journal is damaged and `failure` says where"
})

const FailureBody = Schema.Struct({
  code: FailureCode,
  message: Schema.String,
  retryable: Schema.Boolean,
  ambiguous: Schema.Boolean,
  details: Schema.optional(Json)
}).annotations({ identifier: "Failure" })

export const SessionSummary = Schema.Struct({
  session_id: SessionId,
  status: SessionStatus,
  last_sequence: Schema.Int,
  failure: Schema.optional(FailureBody)
}).annotations({ identifier: "SessionSummary" })

export const SessionList = Schema.Struct({
  sessions: Schema.Array(SessionSummary),
  next_cursor: Schema.NullOr(SessionId)
}).annotations({ identifier: "SessionList" })

export const SendMessageRequest = Schema.Struct({ input: TurnInput.annotations(strict) }).annotations({
  identifier: "SendMessage",
  ...strict
})

export const TurnOutcome = Schema.Struct({
  session_id: SessionId,
  status: SessionStatus,
  last_sequence: Schema.Int,
  turn: Schema.Struct({
    sequence: Schema.Int,
    status: Schema.Literal("ended", "failed"),
    result: Schema.optional(Json),
    failure: Schema.optional(FailureBody)
  })
}).annotations({ identifier: "TurnOutcome" })

export const Receipt = Schema.Struct({
  session_id: SessionId,
  sequence: Schema.Int
}).annotations({
  identifier: "Receipt",
  description: "The committed turn_started of an async submission. `after` is exclusive: read its Events from the turn_started on with `after` = `sequence` − 1"
})

export const Event = Schema.Struct({
  session_id: SessionId,
  sequence: Schema.Int,
  recorded_at_ms: Schema.Int,
  kind: Schema.String,
  data: Json,
  origin: Schema.optionalWith(Origin, { exact: true })
}).annotations({ identifier: "Event" })

export const EventPage = Schema.Struct({
  events: Schema.Array(Event),
  next_cursor: Schema.Int
}).annotations({ identifier: "EventPage", description: "An empty page means the reader has reached the end" })

export const Transcript = Schema.Struct({
  messages: Schema.Array(Message),
  through_sequence: Schema.Int
}).annotations({ identifier: "Transcript" })

export const AgentloopAdmitted = Schema.Struct({
  id: Schema.String.annotations({ description: "SHA-256 of the module's bytes, hex" }),
  bytes: Schema.Int,
  loop: Schema.Boolean.annotations({ description: "it exports brain_run: a session can name it as its agentloop" }),
  tool: Schema.Boolean.annotations({ description: "it exports brain_tool: a tool can run it" })
}).annotations({ identifier: "AgentloopAdmitted" })

export const AgentloopList = Schema.Struct({ agentloops: Schema.Array(AgentloopAdmitted) }).annotations({ identifier: "AgentloopList" })

export const AgentloopPath = Schema.Struct({
  id: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/, { message: () => "an agentloop id is 64 lowercase hex digits" }))
})

/** Cursors and page sizes arrive as query strings: plain decimal digits only (no signs, spaces, hex or exponents). */
const Digits = Schema.compose(
  Schema.String.pipe(Schema.pattern(/^\d{1,15}$/, { message: () => "expected decimal digits" })),
  Schema.NumberFromString
)
const Cursor = Digits.pipe(Schema.int(), Schema.between(0, Number.MAX_SAFE_INTEGER))

/** A page size, 1 to 1000, described with its default for the OpenAPI document (its query string is what a client sends). */
const pageSize = (defaultSize: number, more = "") =>
  Schema.compose(
    Schema.String.pipe(Schema.pattern(/^\d{1,15}$/, { message: () => "expected decimal digits" })).annotations({
      description: `the page size: a whole number from 1 to 1000 (default ${defaultSize})${more}`
    }),
    Schema.NumberFromString
  ).pipe(Schema.int(), Schema.between(1, 1000))

export const EventsParams = Schema.Struct({
  after: Schema.optional(Cursor),
  limit: Schema.optional(pageSize(PAGE_EVENTS, "; an SSE stream (`Accept: text/event-stream`) checks it and sends every Event, unpaged"))
}).annotations(strict)

export const ListParams = Schema.Struct({
  after: Schema.optional(SessionId),
  limit: Schema.optional(pageSize(LIST_PAGE_SESSIONS))
}).annotations(strict)

const utf8Length = (s: string) => new TextEncoder().encode(s).length

/** Printable ASCII, space included: what a header value carries as it is everywhere (fetch, Node, proxies). */
const PRINTABLE_ASCII = /^[\x20-\x7e]*$/

/**
 * `Idempotency-Key`: optional; when present, 1–256 bytes of printable ASCII (the IETF draft's
 * Idempotency-Key is a Structured Field string, which is exactly that). Anything else cannot be
 * sent as it is: fetch refuses a character above U+00FF or a line break, and Node reads a byte
 * above 0x7E as Latin-1, so one key could reach the server as several.
 */
export const IdempotencyKey = Schema.String.pipe(
  // Characters first: a non-ASCII key reaches here as Latin-1, two or more characters a character
  // sent, and was refused for a length the client never gave it.
  Schema.filter((s) => PRINTABLE_ASCII.test(s) || "Idempotency-Key must be printable ASCII (space to ~): no control character, line break or other character"),
  Schema.filter((s) =>
    (utf8Length(s) >= 1 && utf8Length(s) <= IDEMPOTENCY_KEY_MAX_BYTES) || `Idempotency-Key must be 1 to ${IDEMPOTENCY_KEY_MAX_BYTES} bytes`
  )
)

export const MutatingHeaders = Schema.Struct({
  "idempotency-key": Schema.optional(IdempotencyKey)
})

export const MessageHeaders = Schema.Struct({
  "idempotency-key": Schema.optional(IdempotencyKey),
  prefer: Schema.optional(Schema.String)
})

export const SessionPath = Schema.Struct({ id: SessionId })

// ---------------------------------------------------------------------------------------------
// Hosts (docs/environments.md, "The `host` driver")

export const HostRegistered = Schema.Struct({
  host_id: HostId,
  token: Schema.String.annotations({
    description: "The host's own bearer token for its routes. Shown once: the server keeps only its SHA-256"
  })
}).annotations({ identifier: "HostRegistered" })

export const HostPath = Schema.Struct({ id: HostId })

/** A call is named by its session and the sequence of its `tool_call_started`. */
const CallName = {
  session_id: SessionId,
  sequence: Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))
}

/**
 * Any JSON value, which must be there: a member declared `Json` alone (`Schema.Unknown`) takes a
 * missing key as `undefined`, so `{session_id, sequence}` would be a result `ok` with no output.
 */
const Given = Json.pipe(Schema.filter((u) => u !== undefined, { message: () => "is missing", jsonSchema: {} }))

export const HostResult = Schema.Union(
  Schema.Struct({ ...CallName, ok: Given }).annotations({ ...strict, description: "the tool's output" }),
  Schema.Struct({ ...CallName, error: Given }).annotations({ ...strict, description: "the tool's own error, shown to the model" }),
  Schema.Struct({ ...CallName, stopped: Schema.Literal(true) }).annotations({
    ...strict,
    description: "after a cancel command only: the call has stopped and will do nothing further"
  })
).annotations({ identifier: "HostResult" })
export type HostResult = typeof HostResult.Type

export const HostResults = Schema.Struct({
  results: Schema.Array(HostResult).pipe(Schema.minItems(1), Schema.maxItems(HOST_RESULTS_BATCH))
}).annotations({
  ...strict,
  identifier: "HostResults",
  description: `several calls' results at once (1 to ${HOST_RESULTS_BATCH}), each as the single form: all are taken, or none`
})

const ANSWERS = ["ok", "error", "stopped"] as const

/**
 * The answer members a result holds when they are not exactly one (then no form of the union takes
 * it): the two or three it holds, or none; undefined when it holds one, or is not an object.
 */
const answersHeld = (result: unknown): ReadonlyArray<string> | undefined => {
  if (result === null || typeof result !== "object" || Array.isArray(result)) return undefined
  const held = ANSWERS.filter((k) => Object.hasOwn(result, k))
  return held.length === 1 ? undefined : held
}

/**
 * One line for the commonest mistakes, a result holding two answers or none, in place of the
 * union's tree of every form it failed (each other failure keeps that tree, which names the member
 * at fault).
 */
const oneAnswerMessage = (issue: ParseResult.ParseIssue): { readonly message: string; readonly override: boolean } => {
  const rule = `a result holds exactly one of "ok", "error" or "stopped"`
  const held = (where: string, keys: ReadonlyArray<string>) => ({
    message: keys.length === 0
      ? `${where} holds none of "ok", "error" or "stopped": ${rule}`
      : `${where} holds ${keys.map((k) => JSON.stringify(k)).join(" and ")}: ${rule}`,
    override: true
  })
  const body: unknown = "actual" in issue ? issue.actual : undefined
  const results = body !== null && typeof body === "object" ? (body as { results?: unknown }).results : undefined
  if (Array.isArray(results)) {
    for (let i = 0; i < results.length; i++) {
      const keys = answersHeld(results[i])
      if (keys !== undefined) return held(`results[${i}]`, keys)
    }
    return { message: "", override: false }
  }
  const single = answersHeld(body)
  if (single !== undefined && !(body !== null && typeof body === "object" && Object.hasOwn(body, "results"))) return held("the result", single)
  return { message: "", override: false }
}

/** The results route's body: one call's result, or several at once. */
export const HostResultBody = Schema.Union(HostResult, HostResults).annotations({ message: oneAnswerMessage })

const KIND_LENGTH = "an Event's kind is 1 to 255 characters"

export const HostEvent = Schema.Struct({
  ...CallName,
  // Its own message for the length: the description below would otherwise be the refusal's text.
  kind: Schema.String.pipe(Schema.minLength(1, { message: () => KIND_LENGTH }), Schema.maxLength(255)).annotations({
    message: () => KIND_LENGTH,
    description:
      "The Event's kind: no line break (CR or LF) and not a reserved kind (Brain's record and Event kinds, `transcript_replaced`, the SSE frames' names, every failure code), else 400 with `details.reason: \"reserved_kind\"`"
  }),
  payload: Given
}).annotations({ identifier: "HostEvent", ...strict })

export const HostEventCommitted = Schema.Struct({
  sequence: Schema.Int.annotations({ description: "the committed Event's sequence" })
}).annotations({ identifier: "HostEventCommitted" })
