/**
 * The idempotency log as the operator tools see it: checked by the same rules the store opens it
 * with (frames, dense sequences, readable records), read-only, in bounded chunks. Names are
 * relative to the data directory.
 */
import * as path from "node:path"
import { Effect, Either } from "effect"
import { type FileDriverShape, type FileError, withFile } from "../journal/FileDriver.js"
import { LOG_FILE } from "./Log.js"
import { scanLog, type ScanVerdict } from "./Reader.js"
import { decodeIndexRecord } from "./Records.js"

export const IDEMPOTENCY_DIR = "idempotency"

export const logPath = (dataDir: string) => path.join(dataDir, IDEMPOTENCY_DIR, LOG_FILE)

export type LogReport =
  | { readonly _tag: "Absent" }
  | (ScanVerdict & { readonly fileSize: number })

/** Checks the log without changing it: what the store's open would find. */
export const inspectLog = (driver: FileDriverShape, dataDir: string): Effect.Effect<LogReport, FileError> =>
  Effect.gen(function*() {
    const file = logPath(dataDir)
    if (!(yield* driver.exists(file))) return { _tag: "Absent" } as const
    return yield* withFile(driver, file, "r", (fd) =>
      Effect.gen(function*() {
        const fileSize = yield* driver.size(fd)
        const verdict = yield* scanLog(driver, fd, fileSize, (frame) =>
          Either.match(decodeIndexRecord(frame.kind, frame.json), { onLeft: (reason) => reason, onRight: () => undefined }))
        return { ...verdict, fileSize }
      }))
  })
