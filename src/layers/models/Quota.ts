/**
 * Whether a provider's error says the account has run out: its prepaid credit, its quota, or a
 * spend limit is spent. Such an error comes as a 429 (or a rate-limit error inside a stream), like
 * a rate limit, but waiting seconds does not fix it: only a person adding credit or raising the
 * limit, or the monthly reset, does. So the failure keeps its rate-limit code but is not retryable.
 *
 * Read from the error's words the providers document:
 * - OpenAI: `error.type` `insufficient_quota`, with `error.code` naming the cause
 *   (`insufficient_quota`, `credit_balance_exhausted`, `organization_spend_limit_exceeded`,
 *   `project_spend_limit_exceeded`, `organization_usage_limit_exceeded`); API guide "Error codes"
 *   and "Spend limits".
 * - Anthropic: a `rate_limit_error` whose `details.error_code` is `enforced_spend_limit_reached`
 *   (the usage tier's monthly cap) or `contract_spend_limit_reached`; API "Errors".
 */

/** Error words that mean the account's quota or spend limit is spent. */
const QUOTA_WORDS: ReadonlySet<string> = new Set([
  "insufficient_quota",
  "credit_balance_exhausted",
  "organization_spend_limit_exceeded",
  "project_spend_limit_exceeded",
  "organization_usage_limit_exceeded",
  "enforced_spend_limit_reached",
  "contract_spend_limit_reached"
])

const fieldOf = (value: unknown, name: string): unknown =>
  value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>)[name] : undefined

const says = (value: unknown): boolean => typeof value === "string" && QUOTA_WORDS.has(value)

/**
 * Whether `error` — a provider's error object (`{type, code, details}`) or a whole error body that
 * holds one under `error` — says the quota or spend limit is spent.
 */
export const quotaExhausted = (error: unknown): boolean => {
  const own = (e: unknown) => says(fieldOf(e, "type")) || says(fieldOf(e, "code")) || says(fieldOf(fieldOf(e, "details"), "error_code"))
  return own(error) || own(fieldOf(error, "error"))
}
