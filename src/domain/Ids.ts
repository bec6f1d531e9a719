/**
 * Identifiers. `(session_id, sequence)` is the only name of a record or operation in Brain.
 */
import { Clock, Effect, Random, Schema } from "effect"

/** Crockford base32, lower case: time-ordered, no ambiguous letters (i, l, o, u). */
const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"

export const SESSION_ID_PATTERN = /^ses_[0-9abcdefghjkmnpqrstvwxyz]{26}$/

export const SessionId = Schema.String.pipe(
  Schema.pattern(SESSION_ID_PATTERN, {
    message: () => "a session id is `ses_` followed by 26 characters of a time-ordered id"
  }),
  Schema.brand("SessionId")
)
export type SessionId = typeof SessionId.Type

export const isSessionId = Schema.is(SessionId)

/** A journal sequence: dense, starting at 1, one counter per session. */
export const Sequence = Schema.Int.pipe(Schema.greaterThanOrEqualTo(1), Schema.brand("Sequence"))
export type Sequence = typeof Sequence.Type

/**
 * Mints `ses_` + 10 characters of milliseconds + 16 random characters (80 bits), so ids sort by
 * creation time and two servers minting in the same millisecond still do not collide.
 */
export const mintSessionId: Effect.Effect<SessionId> = Effect.map(Effect.suspend(() => mintTimeOrdered("ses_")), (id) => id as SessionId)

export const HOST_ID_PATTERN = /^host_[0-9abcdefghjkmnpqrstvwxyz]{26}$/

/** A registered host (an application process serving host tools): what a `host` Environment names. */
export const HostId = Schema.String.pipe(
  Schema.pattern(HOST_ID_PATTERN, {
    message: () => "a host id is `host_` followed by 26 characters of a time-ordered id"
  }),
  Schema.brand("HostId")
)
export type HostId = typeof HostId.Type

export const isHostId = Schema.is(HostId)

/** Mints `host_` + the same 26 characters as a session id: time-ordered, 80 random bits. */
export const mintHostId: Effect.Effect<HostId> = Effect.map(Effect.suspend(() => mintTimeOrdered("host_")), (id) => id as HostId)

const mintTimeOrdered = (prefix: string): Effect.Effect<string> => Effect.gen(function*() {
  let time = yield* Clock.currentTimeMillis
  const chars: Array<string> = []
  for (let i = 0; i < 10; i++) {
    chars.unshift(ALPHABET[time % 32]!)
    time = Math.floor(time / 32)
  }
  for (let i = 0; i < 16; i++) {
    chars.push(ALPHABET[yield* Random.nextIntBetween(0, 32)]!)
  }
  return `${prefix}${chars.join("")}`
})

/**
 * Whether `u` is a session id, by its pattern alone: what `isSessionId` answers, without a
 * schema's check, for the checks every request takes (a session id given by a caller is checked
 * before anything is built from it: docs/embedding.md).
 */
export const isSessionIdText = (u: unknown): u is SessionId => typeof u === "string" && SESSION_ID_PATTERN.test(u)
