/**
 * Structured output on `send` (docs/sdk.md, "Structured output"): the turn's final answer is read
 * as JSON and decoded with the caller's schema; when it does not decode, the session is sent a
 * correction naming the problems, at most `maxCorrections` times, and then the send fails with the
 * last issues.
 *
 * It is a client-side policy, so it needs the synchronous `send`: the client must see each answer
 * to decide whether to ask again (seed: "client-side structured-output correction requires send";
 * output policy that must outlive the client belongs in a hosted extension).
 */
import { Data } from "effect"
import type { TurnOutcome } from "./Types.js"
import { decode, type Decoded, describeIssues, type Issue, jsonSchemaOf, type Validator } from "./Validate.js"

/** Corrections sent when the caller does not say: one slip is common, a third rarely helps. */
export const DEFAULT_MAX_CORRECTIONS = 2
/** The most corrections one send may ask for: each is a whole turn, billed by the model. */
export const MAX_CORRECTIONS = 10

/** A send with `output` whose last answer still did not decode after its corrections. */
export class BrainOutputInvalid extends Data.TaggedError("BrainOutputInvalid")<{
  readonly message: string
  /** The last answer's problems. */
  readonly issues: ReadonlyArray<Issue>
  /** The last answer's text. */
  readonly text: string
  /** How many corrections were sent. */
  readonly corrections: number
  /** The last turn's outcome. */
  readonly outcome: TurnOutcome
}> {}

/** A send with `output` whose turn failed, so there is no answer to decode (the outcome says why). */
export class BrainTurnFailed extends Data.TaggedError("BrainTurnFailed")<{
  readonly message: string
  readonly outcome: TurnOutcome
  readonly corrections: number
}> {}

/** A turn's outcome with its decoded answer. */
export type StructuredOutcome<A> = TurnOutcome & {
  readonly output: A
  /** How many corrections it took (0: the first answer decoded). */
  readonly corrections: number
}

/** The answer's text: the loop's `{text}` result, or a bare string result. */
export const answerText = (outcome: TurnOutcome): string => {
  const result = outcome.turn.result as unknown
  if (typeof result === "string") return result
  if (typeof result === "object" && result !== null && typeof (result as { text?: unknown }).text === "string") {
    return (result as { text: string }).text
  }
  return ""
}

/** The JSON of an answer, allowing the ```json fence models like to add. */
const parseAnswer = (text: string): { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly issue: Issue } => {
  const trimmed = text.trim()
  const fenced = /^```(?:json)?\s*\n([\s\S]*?)\n?```$/.exec(trimmed)
  try {
    return { ok: true, value: JSON.parse(fenced?.[1] ?? trimmed) }
  } catch (e) {
    return { ok: false, issue: { path: [], message: `the answer is not JSON (${e instanceof Error ? e.message : String(e)})` } }
  }
}

/**
 * The answer decoded, or its issues. A validator that throws is a bug, not an answer that fails it:
 * what it threw is rethrown, so that no correction is sent for it.
 */
export const checkAnswer = async <V extends Validator>(
  schema: V,
  text: string
): Promise<{ readonly ok: true; readonly value: Decoded<V> } | { readonly ok: false; readonly issues: ReadonlyArray<Issue> }> => {
  const parsed = parseAnswer(text)
  if (!parsed.ok) return { ok: false, issues: [parsed.issue] }
  const checked = await decode(schema, parsed.value)
  if (!checked.ok && checked.thrown !== undefined) throw checked.thrown.error
  return checked
}

/** The message that asks the model again, naming what was wrong and, when known, the JSON Schema. */
export const correction = (schema: Validator, issues: ReadonlyArray<Issue>): string => {
  const json = jsonSchemaOf(schema)
  return `Your last answer is not valid output: ${describeIssues(issues)}. ` +
    `Answer again with only the JSON value, no other text.` +
    (json !== undefined ? ` It must match this JSON Schema: ${JSON.stringify(json)}` : "")
}

export const maxCorrectionsOf = (given: number | undefined): number => {
  const n = given ?? DEFAULT_MAX_CORRECTIONS
  if (!Number.isInteger(n) || n < 0 || n > MAX_CORRECTIONS) {
    throw new RangeError(`maxCorrections must be an integer from 0 to ${MAX_CORRECTIONS}, not ${n}`)
  }
  return n
}
