/**
 * What a caller of the Sessions service hands it that the types promise and nothing has checked:
 * an application calling the service directly (brain/effect, docs/embedding.md) has no HTTP
 * decoder before it, so a session id that is not one, or a turn's input of the wrong shape, is
 * refused here with the `InvalidRequest` the HTTP API answers 400 for, naming the field as HTTP's
 * refusal does (domain/DecodeRefusal.ts), before anything is read, built or written. A request the
 * HTTP API decoded passes these checks at the cost of a pattern test and a few property reads.
 */
import { ParseResult, Schema } from "effect"
import { decodeRefused } from "../../domain/DecodeRefusal.js"
import type { InvalidRequest } from "../../domain/Errors.js"
import { isSessionIdText } from "../../domain/Ids.js"
import { nestsDeeperThan } from "../../domain/JsonText.js"
import { MAX_JSON_DEPTH } from "../../domain/Limits.js"
import { TurnInput } from "../../domain/Messages.js"

/** A session id's rule, as the SessionId schema says it. */
const SESSION_ID_RULE = "a session id is `ses_` followed by 26 characters of a time-ordered id"

/** The refusal of `id`, given at `field`, when it is not a session id; undefined when it is one. */
export const idRefused = (id: unknown, field: string = "session_id"): InvalidRequest | undefined =>
  isSessionIdText(id)
    ? undefined
    : decodeRefused([{ _tag: "Refinement", path: [field], message: `${SESSION_ID_RULE}, not ${shown(id)}` }])

const shown = (u: unknown) => {
  const text = typeof u === "string" ? JSON.stringify(u) : String(u)
  return text.length > 80 ? `${text.slice(0, 80)}…` : text
}

/**
 * A turn's input in the shape the checks before its record's read (its message's length, each
 * media item's values): an object with a string `message`, `media` absent or a list of objects,
 * and no other field. The rest of the schema (each media item's fields) is the record's check's,
 * which refuses it typed; a refusal here is explained by a decode. A few property reads for an
 * input HTTP decoded.
 */
const isTurnInput = (u: unknown): boolean => {
  if (typeof u !== "object" || u === null) return false
  const { media, message } = u as { readonly message?: unknown; readonly media?: unknown }
  if (typeof message !== "string") return false
  if (media !== undefined) {
    if (!Array.isArray(media)) return false
    for (const m of media) if (typeof m !== "object" || m === null || Array.isArray(m)) return false
  }
  for (const key in u) if (key !== "message" && key !== "media") return false
  return true
}
const explainInput = Schema.decodeUnknownEither(Schema.Struct({ input: TurnInput }), { onExcessProperty: "error", errors: "all" })

/**
 * The refusal of `value`, given at `field`, when it nests deeper than MAX_JSON_DEPTH (what the
 * HTTP API refuses before it parses a body): what is built and written from it (a record's JSON,
 * a decode's report of it) is made by recursion, which thousands of levels overflow. Measured
 * without recursion; undefined when it is within the bound.
 */
const tooDeepRefused = (value: unknown, field: string): InvalidRequest | undefined =>
  nestsDeeperThan(value, MAX_JSON_DEPTH)
    ? decodeRefused([{ _tag: "Type", path: [field], message: `nests deeper than ${MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH)` }])
    : undefined

/** The refusal of a create's request whose field nests deeper than MAX_JSON_DEPTH, naming the field; undefined when none does. */
export const createRefused = (request: unknown): InvalidRequest | undefined => {
  if (request === null || typeof request !== "object") return undefined
  for (const [field, value] of Object.entries(request)) {
    const refused = tooDeepRefused(value, field)
    if (refused !== undefined) return refused
  }
  return undefined
}

/**
 * The refusal of a turn's input that is not a `TurnInput`, or nests deeper than MAX_JSON_DEPTH,
 * naming its field under `input` as HTTP's 400 does; undefined when it is one. An input of a
 * message alone (a string) cannot nest: only one with `media` is measured.
 */
export const inputRefused = (input: unknown): InvalidRequest | undefined => {
  if (isTurnInput(input)) return (input as { readonly media?: unknown }).media === undefined ? undefined : tooDeepRefused(input, "input")
  const deep = tooDeepRefused(input, "input")
  if (deep !== undefined) return deep
  const explained = explainInput({ input })
  return explained._tag === "Left"
    ? decodeRefused(ParseResult.ArrayFormatter.formatErrorSync(explained.left))
    : decodeRefused([{ _tag: "Type", path: ["input"], message: "is not a turn's input" }])
}
