/**
 * The records of the idempotency log, one JSON payload per frame:
 *
 *   idem_claim   {scope, key, bodyHash, atMs, session?, adopted?}
 *                                                       a key claimed for a request body, with
 *                                                       the session it will act on when the
 *                                                       request picks it (a create's minted id);
 *                                                       `adopted`: a deleted session's key,
 *                                                       handed over (`adopt`)
 *   idem_answer  {scope, key, atMs, answer}             its answer {status, headers, body}, kept
 *   idem_answer  {scope, key, atMs, notKept}            its answer was above the maximum: only
 *                                                       {status, bytes} are kept
 *   idem_release {scope, key, atMs}                     its request did nothing: the key is free
 *
 * Records are applied in log order; a claim for a key already present starts a new entry.
 * Opening reads every payload but keeps no answer body: a replay reads its answer frame back.
 * Fields a record does not know are ignored, so a log written with `adopted` opens on a server
 * that does not write it.
 */
import { Either, Schema } from "effect"
import type { Answer } from "../../services/Idempotency.js"

export const CLAIM_KIND = "idem_claim"
export const ANSWER_KIND = "idem_answer"
export const RELEASE_KIND = "idem_release"
export const claimKind = Buffer.from(CLAIM_KIND, "utf8")
export const answerKind = Buffer.from(ANSWER_KIND, "utf8")
export const releaseKind = Buffer.from(RELEASE_KIND, "utf8")

export const AnswerSchema = Schema.Struct({
  status: Schema.Number,
  headers: Schema.Record({ key: Schema.String, value: Schema.String }),
  body: Schema.String
})
const NotKeptSchema = Schema.Struct({ status: Schema.Number, bytes: Schema.Number })
const ClaimPayload = Schema.parseJson(
  Schema.Struct({
    scope: Schema.String,
    key: Schema.String,
    bodyHash: Schema.String,
    atMs: Schema.Number,
    session: Schema.optional(Schema.String),
    adopted: Schema.optional(Schema.Boolean)
  })
)
const AnswerPayload = Schema.parseJson(
  Schema.Union(
    Schema.Struct({ scope: Schema.String, key: Schema.String, atMs: Schema.Number, answer: AnswerSchema }),
    Schema.Struct({ scope: Schema.String, key: Schema.String, atMs: Schema.Number, notKept: NotKeptSchema })
  )
)
const ReleasePayload = Schema.parseJson(Schema.Struct({ scope: Schema.String, key: Schema.String, atMs: Schema.Number }))
const decodeClaim = Schema.decodeUnknownEither(ClaimPayload)
const decodeRelease = Schema.decodeUnknownEither(ReleasePayload)
const decodeAnswerPayload = Schema.decodeUnknownEither(AnswerPayload)

export interface NotKept {
  readonly status: number
  readonly bytes: number
}

/** What the index learns from one record: never an answer's body. */
export type IndexRecord =
  | {
    readonly _tag: "Claim"
    readonly scope: string
    readonly key: string
    readonly bodyHash: string
    readonly atMs: number
    readonly session?: string | undefined
    readonly adopted?: boolean | undefined
  }
  | {
    readonly _tag: "Answer"
    readonly scope: string
    readonly key: string
    readonly atMs: number
    readonly notKept: NotKept | undefined
    /** The answer is an ambiguous verdict (`isAmbiguousVerdict`). */
    readonly verdict: boolean
  }
  | { readonly _tag: "Release"; readonly scope: string; readonly key: string; readonly atMs: number }

/** Decodes a record for the index, or says why it cannot be read (the log is then damaged). */
export const decodeIndexRecord = (kind: string, json: Buffer): Either.Either<IndexRecord, string> => {
  const text = json.toString("utf8")
  if (kind === CLAIM_KIND) {
    return Either.match(decodeClaim(text), {
      onLeft: () => Either.left(`unreadable ${CLAIM_KIND} payload`),
      onRight: (c) => Either.right({ _tag: "Claim" as const, ...c })
    })
  }
  if (kind === ANSWER_KIND) {
    return Either.match(decodeAnswerPayload(text), {
      onLeft: () => Either.left(`unreadable ${ANSWER_KIND} payload`),
      onRight: (a) =>
        Either.right({
          _tag: "Answer" as const,
          scope: a.scope,
          key: a.key,
          atMs: a.atMs,
          notKept: "notKept" in a ? a.notKept : undefined,
          verdict: "answer" in a && isAmbiguousVerdict(a.answer)
        })
    })
  }
  if (kind === RELEASE_KIND) {
    return Either.match(decodeRelease(text), {
      onLeft: () => Either.left(`unreadable ${RELEASE_KIND} payload`),
      onRight: (r) => Either.right({ _tag: "Release" as const, ...r })
    })
  }
  return Either.left(`unknown record kind ${JSON.stringify(kind)}`)
}

/** Decodes an answer frame read back for a replay: its scope, key and kept answer. */
export const decodeKeptAnswer = (
  kind: string,
  json: Buffer
): Either.Either<{ readonly scope: string; readonly key: string; readonly answer: Answer }, string> => {
  if (kind !== ANSWER_KIND) return Either.left(`a ${JSON.stringify(kind)} record where an ${ANSWER_KIND} was expected`)
  return Either.match(decodeAnswerPayload(json.toString("utf8")), {
    onLeft: () => Either.left(`unreadable ${ANSWER_KIND} payload`),
    onRight: (a) => "answer" in a ? Either.right(a) : Either.left(`an ${ANSWER_KIND} without a kept answer`)
  })
}

export const claimJson = (scope: string, key: string, bodyHash: string, atMs: number, session: string | undefined, adopted = false) =>
  Buffer.from(
    JSON.stringify({ scope, key, bodyHash, atMs, ...(session === undefined ? {} : { session }), ...(adopted ? { adopted } : {}) }),
    "utf8"
  )

/**
 * Whether `answer` is an ambiguous verdict: the 409 `ambiguous` (`details.ambiguous: true`) kept for
 * a request that failed after it may have taken effect (http/Idempotent.ts). Like a claim never
 * answered, it stands for a request that is never run again under its key, so neither expires.
 */
export const isAmbiguousVerdict = (answer: Answer): boolean => {
  if (answer.status !== 409) return false
  try {
    const body = JSON.parse(answer.body) as { readonly code?: unknown; readonly details?: { readonly ambiguous?: unknown } | null }
    return body?.code === "ambiguous" && body.details?.ambiguous === true
  } catch {
    return false
  }
}

/** The JSON of an answer as it is kept (serialized once: its length decides whether it is kept). */
export const answerText = (answer: Answer) => JSON.stringify({ status: answer.status, headers: answer.headers, body: answer.body })

export const keptAnswerJson = (scope: string, key: string, atMs: number, text: string) =>
  Buffer.from(`{"scope":${JSON.stringify(scope)},"key":${JSON.stringify(key)},"atMs":${atMs},"answer":${text}}`, "utf8")

export const releaseJson = (scope: string, key: string, atMs: number) =>
  Buffer.from(JSON.stringify({ scope, key, atMs }), "utf8")

export const notKeptJson = (scope: string, key: string, atMs: number, notKept: NotKept) =>
  Buffer.from(JSON.stringify({ scope, key, atMs, notKept }), "utf8")
