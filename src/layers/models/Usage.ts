/**
 * A usage counter as a provider sends it, read leniently. Brain only copies usage into the
 * result, so a counter that is not a non-negative integer (a fraction, a negative, a string: a
 * compatible server's drift) is taken as not sent, never as a reason to lose the answer it came
 * with: it decodes to null, which every provider reads as absent.
 */
import { Schema } from "effect"

const isCount = (value: unknown): value is number => typeof value === "number" && Number.isSafeInteger(value) && value >= 0

/** A counter: a non-negative integer, else null (not sent). */
const CountOrNull = Schema.transform(Schema.Unknown, Schema.NullOr(Schema.NonNegativeInt), {
  strict: true,
  decode: (value) => (isCount(value) ? value : null),
  encode: (count) => count
})

/** An optional usage counter; anything but a non-negative integer reads as not sent. */
export const UsageCount = Schema.optional(CountOrNull)
