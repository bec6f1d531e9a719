/**
 * Telemetry: what an Agentloop reports through the `telemetry` host service, sent to the sink the
 * deployment configures (BRAIN_TELEMETRY). Best-effort by design: never journaled, never retried,
 * never blocking the turn and never failing it. A record that does not fit the bounded queue is
 * dropped and counted; with no sink configured it is dropped at once, at no cost.
 */
import { Context, Data, Either, type Effect } from "effect"

/** One telemetry call, as written to a JSON-lines sink (one object per line). */
export interface TelemetryRecord {
  readonly session_id: string
  /** The `activation_started` sequence of the activation that reported it. */
  readonly activation: number
  /** From a WebAssembly tool: its call's `tool_call_started` sequence (absent for the loop's own). */
  readonly tool_call?: number
  /** When the host received it, epoch milliseconds. */
  readonly at_ms: number
  /** What the loop passed, as JSON. */
  readonly data: unknown
}

/** Counts since the sink opened. */
export interface TelemetryStats {
  /** Records taken into the queue. */
  readonly accepted: number
  /** Records dropped before the queue: it was full, the record was too large, or not JSON. */
  readonly dropped: number
  /** Records the sink took (written to the file, or acknowledged by the OTLP endpoint). */
  readonly delivered: number
  /** Records lost after the queue: the write or the export failed. */
  readonly failed: number
}

export interface TelemetryShape {
  /** Hands a record to the sink and returns at once; never fails, never waits for the sink. */
  readonly record: (record: TelemetryRecord) => Effect.Effect<void>
  readonly stats: Effect.Effect<TelemetryStats>
}

export class Telemetry extends Context.Tag("brain/Telemetry")<Telemetry, TelemetryShape>() {}

/** The sink could not be opened when the server started (a configured sink that cannot work is refused, not ignored). */
export class TelemetrySinkFailed extends Data.TaggedError("TelemetrySinkFailed")<{ readonly reason: string }> {
  override get message() {
    return `BRAIN_TELEMETRY: ${this.reason}`
  }
}

/**
 * Where telemetry goes (BRAIN_TELEMETRY):
 * - unset or blank: nowhere (dropped);
 * - `file:/path/to/telemetry.jsonl`, or a plain path: JSON lines appended to that file;
 * - `otlp:http://collector:4318` (or `otlp:https://…`): OpenTelemetry log records over OTLP/HTTP
 *   (JSON), posted to `{url}/v1/logs` (a URL already ending in `/v1/logs` is used as it is).
 */
export type TelemetrySink =
  | { readonly _tag: "None" }
  | { readonly _tag: "File"; readonly path: string }
  | { readonly _tag: "Otlp"; readonly url: string }

export const noSink: TelemetrySink = { _tag: "None" }

/** Reads a BRAIN_TELEMETRY value; Left says why it is not one. */
export const parseTelemetrySink = (value: string | undefined): Either.Either<TelemetrySink, string> => {
  const v = value?.trim() ?? ""
  if (v.length === 0) return Either.right(noSink)
  if (v.startsWith("file:")) {
    const path = v.slice("file:".length).replace(/^\/\/(?=\/)/, "") // file:///x is /x
    return path.length > 0 ? Either.right({ _tag: "File", path }) : Either.left("file: needs a path (file:/var/log/brain/telemetry.jsonl)")
  }
  if (v.startsWith("otlp:")) {
    const base = v.slice("otlp:".length)
    const url = URL.canParse(base) ? new URL(base) : undefined
    if (!url || (url.protocol !== "http:" && url.protocol !== "https:")) {
      return Either.left(`otlp: needs an http(s) URL (otlp:http://127.0.0.1:4318), not ${JSON.stringify(base)}`)
    }
    const path = url.pathname.replace(/\/+$/, "")
    url.pathname = path.endsWith("/v1/logs") ? path : `${path}/v1/logs`
    return Either.right({ _tag: "Otlp", url: url.toString() })
  }
  // Anything else with a scheme is a mistake, not a file name (`http://…` meant `otlp:http://…`).
  if (/^[a-z][a-z0-9+.-]*:/i.test(v)) {
    return Either.left(`${JSON.stringify(v)} is neither file:PATH, otlp:URL nor a plain path (for OTLP write otlp:${v})`)
  }
  return Either.right({ _tag: "File", path: v })
}

/** The sink in words, for the startup log (no credentials: a URL's user and password are left out). */
export const describeSink = (sink: TelemetrySink): string => {
  if (sink._tag === "None") return "telemetry: none (BRAIN_TELEMETRY unset); loops' telemetry is dropped"
  if (sink._tag === "File") return `telemetry: JSON lines appended to ${sink.path}`
  const url = new URL(sink.url)
  url.username = ""
  url.password = ""
  return `telemetry: OTLP/HTTP log records to ${url.toString()}`
}
