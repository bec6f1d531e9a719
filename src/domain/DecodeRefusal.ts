/**
 * The refusal of a value that did not decode, as the HTTP API answers it (400 `invalid_request`,
 * docs/api.md "Errors"): one line naming each issue where it is, and `details` listing the
 * decoder's issues. The HTTP decoders' refusals (http/Errors.ts) and the services' own checks of
 * what an application passes them directly (brain/effect: a create's body, a turn's input) both
 * answer it, so an embedded refusal names its field as the HTTP one does.
 */
import { InvalidRequest } from "./Errors.js"

/** An issue as the schema decoder lists it (Effect's ArrayFormatter): `_tag` names its kind. */
export interface DecodeIssue {
  readonly _tag: string
  readonly path: ReadonlyArray<PropertyKey>
  readonly message: string
}

/** Issues a refusal's message names; `details` lists them all. */
const MESSAGE_ISSUES = 5

/** Where an issue is, as a reader writes it: `limit`, `idempotency-key`, `input.message`, `tools[1].name`. */
const whereOf = (path: ReadonlyArray<PropertyKey>) =>
  path.map((key, i) => (typeof key === "number" ? `[${key}]` : i === 0 ? String(key) : `.${String(key)}`)).join("")

/** Whether `path` is `within` or a place inside it. */
const startsWith = (path: ReadonlyArray<PropertyKey>, within: ReadonlyArray<PropertyKey>) =>
  path.length >= within.length && within.every((k, i) => k === path[i])

/**
 * The 400 of a request that did not decode (its path parameters, query, headers or body). `details`
 * lists the decoder's issues but the one an optional field adds for a mistake in its value (the
 * value is not `undefined` either, which no client asked about); the message is one line naming each issue
 * where it is (`limit: Expected a number between 1 and 1000, actual 0`), not the decoder's tree of
 * schema types.
 */
export const decodeRefused = (issues: ReadonlyArray<DecodeIssue>) => {
  const kept = issues.filter((issue, i) =>
    !(issue._tag === "Type" && issue.message.startsWith("Expected undefined, actual") &&
      issues.some((other, j) => j !== i && startsWith(other.path, issue.path)))
  )
  const named = kept.slice(0, MESSAGE_ISSUES).map(({ message, path }) => {
    const text = message.replace(/\s*\n\s*/g, " ")
    return path.length === 0 ? text : `${whereOf(path)}: ${text}`
  })
  const more = kept.length > MESSAGE_ISSUES ? `; and ${kept.length - MESSAGE_ISSUES} more (details)` : ""
  return new InvalidRequest({ message: named.length > 0 ? named.join("; ") + more : "the request is invalid", details: kept })
}
