/**
 * What an `http` Environment's reply means (docs/environments.md, "How Brain reads an answer"),
 * with the binding's secrets redacted from anything it sent back (domain/Redaction.ts). Pure.
 *
 * - 200: the body is UTF-8 JSON whatever its Content-Type, of the endpoint's shape; not JSON or
 *   not of the shape is `EnvironmentUncertain` (it may have run). So is a body nested deeper than
 *   MAX_JSON_DEPTH below its one member (a lifecycle step's result or error, a cancel's answer),
 *   refused by a scan of its text before it is parsed: it would reach the journal and the
 *   recursive code there. A tool call's is not: its output is bounded where its outcome is
 *   recorded (sessions/ToolVerdicts.ts, `invalid_output`, the call not ambiguous).
 * - 409: a repeat, or a call cancelled before it came: `EnvironmentUncertain` `duplicate`.
 * - Other 3xx and 4xx: refused, not run: `EnvironmentRefused`.
 * - 5xx, a 2xx other than 200, anything else: `EnvironmentUncertain` `status`.
 *
 * An error status's body goes into the failure as JSON when it parses within MAX_JSON_DEPTH, else
 * as text. A 200 in a
 * content coding (Brain asks for none: `Accept-Encoding: identity`) is `not_json`, naming the
 * coding. Reading never throws: whatever fails while reading a 200 (a bug here, the engine's
 * limits) is that answer's `bad_shape`, so a call always has an outcome; an answer handed to a
 * callback that threw would be lost, and its call left waiting for its deadline.
 */
import { Either } from "effect"
import { nestingDepth } from "../../domain/JsonText.js"
import { MAX_JSON_DEPTH } from "../../domain/Limits.js"
import { redact, redactCutText, redactText } from "../../domain/Redaction.js"
import { EnvironmentRefused, EnvironmentUncertain } from "../../services/Environments.js"
import type { Reply } from "./Exchange.js"

/** A 200 body with its members' values redacted (their names are the protocol's: `ok`, `error`, `stopped`). */
const redactMembers = (body: unknown, secrets: ReadonlyArray<string>): unknown =>
  body !== null && typeof body === "object" && !Array.isArray(body)
    ? Object.fromEntries(Object.entries(body).map(([k, v]) => [k, redact(v, secrets)]))
    : body

/** A coding as a message shows it: one line, its first 64 characters, redacted (it came from the Environment). */
const codingShown = (coding: string, secrets: ReadonlyArray<string>): string => {
  const line = JSON.stringify(coding).slice(1, -1)
  return line.length > 64 ? redactCutText(line.slice(0, 64), secrets) : redactText(line, secrets)
}

const utf8 = new TextDecoder("utf-8", { fatal: true })

/** Why a body was not read as JSON. */
type Unread = "not_json" | "too_deep"

/**
 * The body as JSON; not when it is not UTF-8 JSON, or (with `maxDepth`) when its text nests deeper
 * than `maxDepth`, found by a scan before anything parses it.
 */
const parseJson = (body: Uint8Array, maxDepth: number | undefined): Either.Either<unknown, Unread> => {
  const text = Either.try({ try: () => utf8.decode(body), catch: (): Unread => "not_json" })
  if (Either.isLeft(text)) return text
  if (maxDepth !== undefined && nestingDepth(text.right) > maxDepth) return Either.left("too_deep")
  return Either.try({ try: () => JSON.parse(text.right) as unknown, catch: (): Unread => "not_json" })
}

/** An error response's body for a failure's details: JSON when it parses within MAX_JSON_DEPTH, else text; redacted. */
export const errorBody = (reply: Reply, secrets: ReadonlyArray<string>): unknown => {
  if (reply.body.length === 0) return undefined
  const parsed = reply.truncated ? Either.left(undefined) : parseJson(reply.body, MAX_JSON_DEPTH)
  if (Either.isRight(parsed)) return redact(parsed.right, secrets)
  const text = Buffer.from(reply.body).toString("utf8")
  return reply.truncated ? redactCutText(text, secrets) : redactText(text, secrets)
}

export interface Reading<A> {
  readonly environment: string
  readonly path: string
  readonly secrets: ReadonlyArray<string>
  /** The endpoint's 200 shape: the answer, or undefined when the body is not of it. */
  readonly shape: (body: unknown) => A | undefined
  /**
   * A tool call's: its 200 body is not held to MAX_JSON_DEPTH here, since its output's depth is
   * checked where its outcome is recorded (`invalid_output`, the call not ambiguous). Every other
   * 200 body nesting deeper than MAX_JSON_DEPTH below its one member is malformed (`bad_shape`).
   */
  readonly outputDepthChecked?: true
}

/** What a reply means: the 200 answer of the endpoint's shape, or how it failed. */
export const readReply = <A>(
  reply: Reply,
  reading: Reading<A>
): Either.Either<A, EnvironmentRefused | EnvironmentUncertain> => {
  const read = Either.try({
    try: () => meaningOf(reply, reading),
    catch: (e) =>
      new EnvironmentUncertain({
        environment: reading.environment,
        reason: "bad_shape",
        status: reply.status,
        message: `Environment ${JSON.stringify(reading.environment)} answered ${reading.path} with a body Brain could not read (` +
          `${e instanceof Error ? e.name : "error"})`
      })
  })
  return Either.isLeft(read) ? Either.left(read.left) : read.right
}

const meaningOf = <A>(
  reply: Reply,
  reading: Reading<A>
): Either.Either<A, EnvironmentRefused | EnvironmentUncertain> => {
  const env = JSON.stringify(reading.environment)
  const { status } = reply
  if (status === 200) {
    const uncertain = (reason: "not_json" | "bad_shape", what: string) =>
      Either.left(new EnvironmentUncertain({ environment: reading.environment, reason, status, message: `Environment ${env} answered ${reading.path} with ${what}` }))
    if (reply.coding !== undefined) {
      return uncertain("not_json", `a body in Content-Encoding ${codingShown(reply.coding, reading.secrets)}, which Brain does not decode (it sends Accept-Encoding: identity)`)
    }
    // The body's one member adds a level to what it carries.
    const parsed = parseJson(reply.body, reading.outputDepthChecked ? undefined : MAX_JSON_DEPTH + 1)
    if (Either.isLeft(parsed)) {
      return parsed.left === "too_deep"
        ? uncertain("bad_shape", `a body nested deeper than ${MAX_JSON_DEPTH} levels below its member (MAX_JSON_DEPTH), which Brain does not record`)
        : uncertain("not_json", "a body that is not UTF-8 JSON")
    }
    const answer = reading.shape(redactMembers(parsed.right, reading.secrets))
    return answer === undefined ? uncertain("bad_shape", "a body that is not of the protocol's shape") : Either.right(answer)
  }
  const body = errorBody(reply, reading.secrets)
  if (status === 409) {
    return Either.left(new EnvironmentUncertain({
      environment: reading.environment,
      reason: "duplicate",
      status,
      body,
      message: `Environment ${env} answered ${reading.path} with 409: it had received this operation already, or the call was cancelled`
    }))
  }
  if (status >= 300 && status < 500) {
    return Either.left(new EnvironmentRefused({ environment: reading.environment, status, body, message: `Environment ${env} refused ${reading.path} with ${status}` }))
  }
  return Either.left(new EnvironmentUncertain({
    environment: reading.environment,
    reason: "status",
    status,
    body,
    message: `Environment ${env} answered ${reading.path} with ${status}`
  }))
}
