/**
 * The record catalogue: every kind a session journal may hold, its payload schema and whether
 * it is a public Event. This is the one place the kinds are named; docs/journal.md mirrors it
 * and a test checks that the two agree.
 */
import { Either, ParseResult, Schema } from "effect"
import { SessionConfiguration } from "./Configuration.js"
import { Failure, FailureCodes } from "./Failure.js"
import { IDEMPOTENCY_KEY_MAX_BYTES, MAX_EVENT_KIND_CHARS } from "./Limits.js"
import { Json, Message, TranscriptDelta, TurnInput } from "./Messages.js"
import { type Guard, guard } from "./SchemaGuard.js"

const Seq = Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))
const Closes = { sequence: Seq }
const Failed = Schema.Struct({ ...Closes, failure: Failure })
const Ended = Schema.Struct({ ...Closes, result: Schema.optional(Json) })

export const Origin = Schema.Struct({
  kind: Schema.Literal("agentloop", "tool"),
  sequence: Seq
})
export type Origin = typeof Origin.Type

export const ModelContext = Schema.Struct({
  through_sequence: Schema.Int.pipe(Schema.greaterThanOrEqualTo(0)),
  delta: TranscriptDelta
})

export const ToolOutcome = Schema.Literal("ok", "error", "timeout", "cancelled", "unknown")
export type ToolOutcome = typeof ToolOutcome.Type

const EnvironmentStarted = Schema.Struct({ environment: Schema.String, request: Schema.optional(Json) })

/** The reserved frame kind that carries extension Events. */
export const EXTENSION_KIND = "extension"

/** The public kind a replacing transcript delta is projected as. */
export const TRANSCRIPT_REPLACED = "transcript_replaced"

/**
 * The Events after which nothing more of a session's life will be recorded: its end, or its
 * creation's failure (a failed session takes no message and never ends; only a delete's teardowns
 * may follow either). A stream of the session ends after one of them.
 */
export const isFinalKind = (kind: string): boolean => kind === "session_ended" || kind === "session_creation_failed"

interface KindSpec {
  readonly group: string
  readonly visibility: "public" | "private"
  readonly payload: Schema.Schema<any, any, never>
}

const pub = (group: string, payload: Schema.Schema<any, any, never>): KindSpec => ({ group, visibility: "public", payload })
const priv = (group: string, payload: Schema.Schema<any, any, never>): KindSpec => ({ group, visibility: "private", payload })

export const Catalogue = {
  session_creation_started: pub("creation", Schema.Struct({ configuration: SessionConfiguration })),
  session_creation_ended: pub("creation", Ended),
  session_creation_failed: pub("creation", Failed),

  turn_started: pub("turn", Schema.Struct({ input: TurnInput, mode: Schema.Literal("send", "submit") })),
  turn_ended: pub("turn", Ended),
  turn_failed: pub("turn", Failed),

  activation_started: pub("activation", Schema.Struct({ agentloop: Schema.String })),
  activation_ended: pub("activation", Ended),
  activation_failed: pub("activation", Failed),

  model_call_started: pub(
    "model",
    Schema.Struct({
      message_count: Schema.Int.pipe(Schema.greaterThanOrEqualTo(0)),
      context: ModelContext,
      /** The system prompt, only when the call used another than the configuration's. */
      system: Schema.optional(Schema.String),
      /** The loop's request options, as sent. */
      options: Schema.optional(Json)
    })
  ),
  model_call_ended: pub("model", Schema.Struct({ ...Closes, result: Json })),
  model_call_failed: pub("model", Failed),

  tool_call_started: pub(
    "tool",
    Schema.Struct({
      tool: Schema.String,
      call_id: Schema.String,
      input: Json,
      deadline_at_ms: Schema.Int
    })
  ),
  tool_call_ended: pub(
    "tool",
    Schema.Struct({ ...Closes, outcome: Schema.Literal("ok", "error"), output: Json, is_error: Schema.Boolean })
  ),
  tool_call_failed: pub(
    "tool",
    Schema.Struct({
      ...Closes,
      outcome: Schema.Literal("timeout", "cancelled", "unknown", "error"),
      failure: Failure,
      is_error: Schema.Literal(true)
    })
  ),

  environment_setup_started: pub("environment", EnvironmentStarted),
  environment_setup_ended: pub("environment", Ended),
  environment_setup_failed: pub("environment", Failed),
  environment_detach_started: pub("environment", EnvironmentStarted),
  environment_detach_ended: pub("environment", Ended),
  environment_detach_failed: pub("environment", Failed),
  environment_teardown_started: pub("environment", EnvironmentStarted),
  environment_teardown_ended: pub("environment", Ended),
  environment_teardown_failed: pub("environment", Failed),

  session_end_started: pub("ending", Schema.Struct({})),
  session_ended: pub("ending", Schema.Struct({ sequence: Schema.optional(Seq) })),

  transcript_delta: priv("state", TranscriptDelta),
  kv_put: priv("state", Schema.Struct({ key: Schema.String, value: Json })),
  kv_delete: priv("state", Schema.Struct({ key: Schema.String })),

  /**
   * A keyed send or submit: its `Idempotency-Key` and request hash, in the same append as its
   * `turn_started` (the claim is durable exactly when the turn is). `at_ms` is when it was made.
   */
  request_claimed: priv(
    "request",
    Schema.Struct({
      mode: Schema.Literal("send", "submit"),
      key: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(IDEMPOTENCY_KEY_MAX_BYTES)),
      request_hash: Schema.String,
      at_ms: Schema.Int
    })
  ),
  /**
   * A keyed send answered: in its turn's closing append, so the closing record is its answer.
   * A turn closed by recovery has none: its request's outcome was never answered.
   */
  request_answered: priv(
    "request",
    Schema.Struct({ key: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(IDEMPOTENCY_KEY_MAX_BYTES)), at_ms: Schema.Int })
  ),

  [EXTENSION_KIND]: pub(
    "extension",
    Schema.Struct({ kind: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(MAX_EVENT_KIND_CHARS)), payload: Json, origin: Origin })
  )
} as const satisfies Record<string, KindSpec>

export type RecordKind = keyof typeof Catalogue
export const RecordKinds = Object.keys(Catalogue) as ReadonlyArray<RecordKind>

export type PayloadOf<K extends RecordKind> = Schema.Schema.Type<(typeof Catalogue)[K]["payload"]>

export const isRecordKind = (kind: string): kind is RecordKind => Object.prototype.hasOwnProperty.call(Catalogue, kind)

/**
 * The SSE control frames' event names: a stream that ends other than after `session_ended` says
 * why in one of these, with no `id:`. Reserved below, so no Event can be mistaken for one.
 */
export const STREAM_ERROR = "stream_error"
export const STREAM_LAGGED = "stream_lagged"
/** The SSE event name of a live-only model delta (no sequence, never journaled). */
export const MODEL_DELTA = "model_delta"

/**
 * Kinds an extension can never emit: every system kind, the projected kinds, control frames' names,
 * and every public failure code (an Event named `cancelled` or `agentloop_failed` would pass for
 * Brain's own word on an outcome; the seed reserves the public system codes).
 */
export const ReservedKinds: ReadonlySet<string> = new Set<string>([
  ...RecordKinds,
  TRANSCRIPT_REPLACED,
  STREAM_ERROR,
  STREAM_LAGGED,
  MODEL_DELTA,
  ...FailureCodes
])

/**
 * Why an extension may not emit an Event of `kind` (each refusal is `reserved_kind`), or undefined
 * when it may: a kind must be a non-empty string, not a reserved one, and hold no line break. A
 * kind is its SSE frame's `event:` line (DESIGN §7), which a CR or LF would end, letting the rest
 * of the kind pass for fields of its own (`id:`, another `event:`); refused where a kind enters,
 * so every Event's frame carries its `event:` line. (Not in the catalogue's schema of the
 * extension record: a journal holding such a kind from before stays readable, and its frame goes
 * without the line: layers/sessions/SseFrames.ts.)
 */
export const emitRefusal = (kind: unknown): string | undefined =>
  typeof kind !== "string" || kind.length === 0
    ? `an Event kind is a non-empty string, not ${JSON.stringify(kind) ?? String(kind)}`
    : ReservedKinds.has(kind)
    ? `the Event kind ${JSON.stringify(kind)} is reserved`
    : /[\r\n]/.test(kind)
    ? `the Event kind ${JSON.stringify(kind)} holds a line break (CR or LF), which its SSE frame's event: line cannot carry`
    : undefined

/** Started kinds whose outcome must be recorded; the value lists the kinds that close them. */
export const EffectKinds = {
  model_call_started: ["model_call_ended", "model_call_failed"],
  tool_call_started: ["tool_call_ended", "tool_call_failed"],
  environment_setup_started: ["environment_setup_ended", "environment_setup_failed"],
  environment_detach_started: ["environment_detach_ended", "environment_detach_failed"],
  environment_teardown_started: ["environment_teardown_ended", "environment_teardown_failed"]
} as const satisfies Partial<Record<RecordKind, ReadonlyArray<RecordKind>>>

/** A record to append: a catalogue kind and its payload. */
export interface Entry<K extends RecordKind = RecordKind> {
  readonly kind: K
  readonly payload: PayloadOf<K>
}

export const entry = <K extends RecordKind>(kind: K, payload: PayloadOf<K>): Entry<K> => ({ kind, payload })

/**
 * A record to append whose payload its maker has already written as JSON: `json` must be
 * `JSON.stringify(payload)`, which the journal then writes as it is rather than write the payload
 * again (a tool's outcome, written once to learn whether it can be: sessions/ToolVerdicts.ts).
 */
export interface WrittenEntry<K extends RecordKind = RecordKind> extends Entry<K> {
  readonly json: string
}

export const writtenEntry = <K extends RecordKind>(kind: K, payload: PayloadOf<K>, json: string): WrittenEntry<K> => ({ kind, payload, json })

/** A committed record, as read back from a journal. */
export interface JournalRecord {
  readonly sequence: number
  readonly recorded_at_ms: number
  readonly kind: RecordKind
  readonly payload: any
}

const validators = Object.fromEntries(
  RecordKinds.map((kind) => [
    kind,
    Schema.decodeUnknownEither(Catalogue[kind].payload as Schema.Schema<unknown, unknown, never>, {
      onExcessProperty: "error",
      errors: "first"
    })
  ])
) as Record<RecordKind, (u: unknown) => Either.Either<unknown, ParseResult.ParseError>>

/**
 * The same checks as plain predicates (SchemaGuard.ts), for the kinds whose schema compiles to
 * one: every append runs them, and a decode's copy of the payload is not needed to say yes.
 */
const guards = Object.fromEntries(RecordKinds.map((kind) => [kind, guard(Catalogue[kind].payload)])) as Record<RecordKind, Guard | undefined>

/** Checks a payload against its kind's schema; returns the reason it is refused, if it is. */
export const checkPayload = (kind: string, payload: unknown): string | undefined => {
  if (!isRecordKind(kind)) return `unknown record kind ${JSON.stringify(kind)}`
  if (guards[kind]?.(payload) === true) return undefined
  // Refused by the guard (or no guard): the decoder decides, and explains a refusal.
  const result = validators[kind](payload)
  return Either.isLeft(result)
    ? `invalid ${kind} payload: ${ParseResult.TreeFormatter.formatErrorSync(result.left)}`
    : undefined
}

/**
 * Every issue of a payload its kind's schema refuses, as the decoder lists them (Effect's
 * ArrayFormatter: `_tag`, `path` within the payload, `message`), for a refusal that names its
 * fields (domain/DecodeRefusal.ts); empty when it is accepted. Only asked after `checkPayload`
 * refused: it decodes the whole payload again, every issue found.
 */
export const payloadIssues = (kind: RecordKind, payload: unknown): ReadonlyArray<ParseResult.ArrayFormatterIssue> => {
  const result = Schema.decodeUnknownEither(Catalogue[kind].payload as Schema.Schema<unknown, unknown, never>, {
    onExcessProperty: "error",
    errors: "all"
  })(payload)
  return Either.isLeft(result) ? ParseResult.ArrayFormatter.formatErrorSync(result.left) : []
}

/**
 * A committed frame's record read back: its payload, or why it is not a record of the catalogue —
 * its kind unknown, its payload not JSON or not its kind's schema. A frame whose checksums hold
 * but whose record cannot be read is damage like a failed checksum (docs/journal.md, Opening and
 * recovery). It is checked where frames are read from storage; appends were checked by
 * `checkPayload` before they were written.
 */
export const readPayload = (kind: string, json: string): Either.Either<unknown, string> => {
  if (!isRecordKind(kind)) return Either.left(`unknown record kind ${JSON.stringify(kind)}`)
  let payload: unknown
  try {
    payload = JSON.parse(json)
  } catch {
    return Either.left(`${kind} payload is not JSON`)
  }
  const refused = checkPayload(kind, payload)
  return refused === undefined ? Either.right(payload) : Either.left(refused)
}

export { Json, Message }
