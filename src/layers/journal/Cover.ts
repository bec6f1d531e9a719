/**
 * What a session's checkpoint covers, as the open of its journal uses it (Handle.ts): the record
 * the checkpoint was folded through, when the checkpoint holds — its checksum over the whole file,
 * its format and its session. Whether the journal still holds that record (its digest) is told by
 * the open's scan, which reaches it. The checkpoint's state is not read here (the projection reads
 * it, ProjectionCheckpointed.ts); only its bytes go through the checksum, a chunk at a time.
 *
 * A checkpoint that is missing, cannot be read, or does not hold covers nothing: the open then
 * checks every record, as it does without one. Nothing here fails.
 */
import * as path from "node:path"
import { Effect } from "effect"
import type { SessionId } from "../../domain/Ids.js"
import { CHECKPOINT_HEAD_BYTES, CHECKPOINT_HEADER_BYTES, checkpointHead } from "../projection/Checkpoint.js"
import { CHECKPOINT_FILE, sessionDir } from "./DataDir.js"
import { type FileDriverShape, withFile } from "./FileDriver.js"
import { crc32 } from "./Frame.js"

/** The record a valid checkpoint was folded through: its sequence and digest (Checkpoint.ts, `recordDigest`). */
export interface Cover {
  readonly sequence: number
  readonly digest: number
}

/** Bytes of the checkpoint read at a time for its checksum: its memory, whatever the checkpoint's size. */
const COVER_READ_BYTES = 1024 * 1024

export const readCover = (driver: FileDriverShape, dataDir: string, session: SessionId): Effect.Effect<Cover | undefined> =>
  withFile(driver, path.join(sessionDir(dataDir, session), CHECKPOINT_FILE), "r", (fd) =>
    Effect.gen(function*() {
      const buf = Buffer.allocUnsafe(COVER_READ_BYTES)
      let read = yield* driver.read(fd, buf, 0)
      const head = checkpointHead(buf.toString("utf8", 0, Math.min(read, CHECKPOINT_HEAD_BYTES)))
      if (head === undefined || head.session !== session) return undefined
      let crc = crc32(buf.subarray(CHECKPOINT_HEADER_BYTES, read))
      let at = read
      while (read === buf.length) {
        read = yield* driver.read(fd, buf, at)
        crc = crc32(buf.subarray(0, read), crc)
        at += read
      }
      return crc.toString(16).padStart(8, "0") === head.checksum ? head.through : undefined
    })).pipe(Effect.orElseSucceed(() => undefined))
