/**
 * No telemetry sink (BRAIN_TELEMETRY unset): every record is dropped at once, without being
 * serialized or counted, so a loop's telemetry costs nothing.
 */
import { Effect, Layer } from "effect"
import { Telemetry, type TelemetryShape } from "../services/Telemetry.js"

export const none: TelemetryShape = {
  record: () => Effect.void,
  stats: Effect.succeed({ accepted: 0, dropped: 0, delivered: 0, failed: 0 })
}

export const layer = Layer.succeed(Telemetry, none)
