/**
 * The checkpoint file: `crc32-hex\n` then a JSON body `{format, session, through, state}`.
 * `through` names the last record it covers by sequence and a digest of that record, so an open
 * can tell whether the journal still holds the exact prefix the checkpoint was folded from.
 */
import { crc32 } from "../journal/Frame.js"
import type { JournalRecord } from "../../domain/Records.js"
import type { SerializedState } from "../../domain/SerializedState.js"

export const CHECKPOINT_FORMAT = "brain-checkpoint/3"

export interface CheckpointBody {
  readonly format: typeof CHECKPOINT_FORMAT
  readonly session: string
  readonly through: { readonly sequence: number; readonly digest: number }
  readonly state: SerializedState
}

/** Identifies one record: its sequence, time, kind and payload. */
export const recordDigest = (r: JournalRecord): number =>
  crc32(Buffer.from(JSON.stringify([r.sequence, r.recorded_at_ms, r.kind, r.payload]), "utf8"))

export const encodeCheckpoint = (body: CheckpointBody): string => {
  const json = JSON.stringify(body)
  return `${crc32(Buffer.from(json, "utf8")).toString(16).padStart(8, "0")}\n${json}`
}

/** Bytes. How much of a checkpoint's start `checkpointThrough` needs: its header and `format`, `session` and `through`, which come first. */
export const CHECKPOINT_HEAD_BYTES = 256

/**
 * The sequence a checkpoint says it covers, read from its first bytes (CHECKPOINT_HEAD_BYTES)
 * without checking the rest: for weighing what an open with it will read, never for using it
 * (`decodeCheckpoint` does that). Undefined when its start does not say.
 */
export const checkpointThrough = (head: string): number | undefined => {
  const found = /^[0-9a-f]{8}\n\{"format":"[^"]*","session":"[^"]*","through":\{"sequence":(\d{1,15})[,}]/.exec(head)
  return found === null ? undefined : Number(found[1])
}

/** The body if the text is whole and of this format; undefined when damaged. */
export const decodeCheckpoint = (text: string, session: string): CheckpointBody | undefined => {
  const nl = text.indexOf("\n")
  if (nl !== 8) return undefined
  const json = text.slice(nl + 1)
  if (crc32(Buffer.from(json, "utf8")).toString(16).padStart(8, "0") !== text.slice(0, 8)) return undefined
  let body: CheckpointBody
  try {
    body = JSON.parse(json)
  } catch {
    return undefined
  }
  if (body.format !== CHECKPOINT_FORMAT || body.session !== session) return undefined
  if (!Number.isInteger(body.through?.sequence) || body.through.sequence < 1) return undefined
  return body
}
