/**
 * Telemetry as OpenTelemetry log records over OTLP/HTTP (BRAIN_TELEMETRY=otlp:URL): each record
 * becomes one log record (body: the loop's data; attributes `brain.session_id`,
 * `brain.activation` and, from a tool, `brain.tool_call`; time: `at_ms`) of the resource `service.name = brain`, encoded with
 * @effect/opentelemetry's OTLP data model and JSON serialization (`OtlpResource`,
 * `OtlpSerialization.layerJson`) and POSTed to `{url}/v1/logs`.
 *
 * Why not @effect/opentelemetry's `OtlpLogger` exporter itself: its buffer has no bound. Every
 * full batch forks another export, none of them with a timeout, so a collector that accepts
 * connections but answers slowly holds every batch in memory. Here the bounded queue
 * (TelemetryBuffer) feeds one export at a time, each bounded by TELEMETRY_EXPORT_TIMEOUT_MS;
 * while it is in flight new records wait in the queue, and past its bound they are dropped.
 *
 * Best-effort: an export that fails (connection refused, a non-2xx answer, the timeout) loses
 * its batch, counted and logged at most once a minute; nothing is retried, and the next batch
 * is tried as usual. Nothing is checked at start (a collector may come up later).
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as OtlpResource from "@effect/opentelemetry/OtlpResource"
import { layerJson, OtlpSerialization } from "@effect/opentelemetry/OtlpSerialization"
import { Clock, Duration, Effect, Layer, Stream } from "effect"
import { TELEMETRY_EXPORT_TIMEOUT_MS } from "../domain/Limits.js"
import { ServerConfig } from "../services/ServerConfig.js"
import { Telemetry, type TelemetryRecord } from "../services/Telemetry.js"
import * as TelemetryBuffer from "./TelemetryBuffer.js"

/** OTLP's INFO severity: telemetry is information the loop chose to report. */
const SEVERITY_INFO = 9

/** JSON as an OTLP AnyValue, keeping objects structured (key/value lists) rather than as text. */
export const toAnyValue = (value: unknown): OtlpResource.AnyValue => {
  if (value === null || value === undefined) return {}
  if (Array.isArray(value)) return { arrayValue: { values: value.map(toAnyValue) } }
  if (typeof value === "object") {
    return { kvlistValue: { values: Object.entries(value).map(([key, v]) => ({ key, value: toAnyValue(v) })) } }
  }
  return OtlpResource.unknownToAttributeValue(value)
}

/** For logs: a URL's user and password are left out. */
const withoutCredentials = (url: string) => {
  const u = new URL(url)
  u.username = ""
  u.password = ""
  return u.toString()
}

const toLogRecord = (record: TelemetryRecord, observedAtMs: number) => ({
  timeUnixNano: `${record.at_ms}000000`,
  observedTimeUnixNano: `${observedAtMs}000000`,
  severityNumber: SEVERITY_INFO,
  severityText: "INFO",
  body: toAnyValue(record.data),
  attributes: OtlpResource.entriesToAttributes([
    ["brain.session_id", record.session_id],
    ["brain.activation", record.activation],
    ...(record.tool_call === undefined ? [] : [["brain.tool_call", record.tool_call] as [string, unknown]])
  ]),
  droppedAttributesCount: 0
})

export const make = (url: string) =>
  Effect.gen(function*() {
    const config = yield* ServerConfig
    const serialization = yield* OtlpSerialization
    const client = HttpClient.filterStatusOk(yield* HttpClient.HttpClient)
    const resource = OtlpResource.make({ serviceName: "brain" })
    const scope = { name: "brain.telemetry" }
    const timeout = Duration.millis(TELEMETRY_EXPORT_TIMEOUT_MS)

    const deliver = (batch: ReadonlyArray<TelemetryBuffer.Line>) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const logRecords = batch.map((line) => toLogRecord(JSON.parse(line.json) as TelemetryRecord, now))
        const request = HttpClientRequest.post(url).pipe(
          HttpClientRequest.setBody(serialization.logs({ resourceLogs: [{ resource, scopeLogs: [{ scope, logRecords }] }] }))
        )
        const response = yield* client.execute(request)
        // Read the (small) answer to its end so the connection can be reused.
        yield* Stream.runDrain(response.stream)
      }).pipe(
        Effect.timeoutFail({ duration: timeout, onTimeout: () => `no answer within ${TELEMETRY_EXPORT_TIMEOUT_MS} ms` }),
        Effect.mapError((e) => `the export failed: ${typeof e === "string" ? e : e.message.replace(url, withoutCredentials(url))}`),
        Effect.withTracerEnabled(false)
      )
    return yield* TelemetryBuffer.make({ name: `otlp ${withoutCredentials(url)}`, queueBytes: config.telemetryQueueBytes, deliver })
  })

/** Telemetry to an OTLP/HTTP endpoint (`…/v1/logs`); needs an HttpClient. */
export const layer = (url: string) => Layer.scoped(Telemetry, make(url)).pipe(Layer.provide(layerJson))
