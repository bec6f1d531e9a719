/**
 * Telemetry as JSON lines appended to a file (BRAIN_TELEMETRY=file:PATH, or a plain path): one
 * `{session_id, activation, at_ms, data}` object per line.
 *
 * - The file is opened once, when the server starts, in append mode (created if missing; its
 *   directory must exist). A file that cannot be opened refuses the start: a configured sink
 *   that cannot work is a mistake to report, not to ignore.
 * - Lines are written in batches from the bounded queue (TelemetryBuffer) and never fsynced:
 *   telemetry is not durable history, and a sync per batch would compete with the journal's.
 * - A failed write (ENOSPC, EIO) loses its batch, which is counted and logged (at most once a
 *   minute); later batches are tried as usual, so telemetry resumes once the disk takes writes.
 *   The batch after a failed one starts with a newline, so that a partly written line stands
 *   alone and a reader can skip it.
 * - Closed when the server stops, after the queue has had TELEMETRY_FLUSH_MS to empty.
 */
import { Effect, Layer } from "effect"
import { Telemetry, TelemetrySinkFailed } from "../services/Telemetry.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { FileDriver, type FileError } from "./journal/FileDriver.js"
import * as TelemetryBuffer from "./TelemetryBuffer.js"

/** A file error in words, without repeating its code. */
const fileErrorText = (e: FileError) => (e.detail.startsWith(e.code) ? e.detail : `${e.code} ${e.detail}`)

export const make = (path: string) =>
  Effect.gen(function*() {
    const driver = yield* FileDriver
    const config = yield* ServerConfig
    const fd = yield* Effect.acquireRelease(
      driver.open(path, "a").pipe(Effect.mapError((e) => new TelemetrySinkFailed({ reason: `cannot open ${path}: ${fileErrorText(e)}` }))),
      (fd) => Effect.ignore(driver.close(fd))
    )
    // Where the next batch goes. In append mode the system writes at the end anyway; the position
    // is kept for systems that honour it.
    let position = yield* Effect.orElseSucceed(driver.size(fd), () => 0)
    let torn = false
    const deliver = (batch: ReadonlyArray<TelemetryBuffer.Line>) =>
      Effect.suspend(() => {
        const text = (torn ? "\n" : "") + batch.map((l) => l.json).join("\n") + "\n"
        const buffer = Buffer.from(text, "utf8")
        return driver.writev(fd, [buffer], position).pipe(
          Effect.map(() => {
            position += buffer.length
            torn = false
          }),
          Effect.catchAll((e) =>
            Effect.gen(function*() {
              torn = true
              position = yield* Effect.orElseSucceed(driver.size(fd), () => position)
              return yield* Effect.fail(`writing ${path} failed: ${fileErrorText(e)}`)
            })
          )
        )
      })
    // Closing order: the buffer's finalizers (stop, flush) run before the file is closed.
    return yield* TelemetryBuffer.make({ name: `file ${path}`, queueBytes: config.telemetryQueueBytes, deliver })
  })

/** Telemetry appended to `path` as JSON lines; needs a FileDriver. */
export const layer = (path: string) => Layer.scoped(Telemetry, make(path))
