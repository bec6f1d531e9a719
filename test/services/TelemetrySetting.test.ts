/**
 * BRAIN_TELEMETRY read the way `brain serve` reads it: unset drops telemetry; `file:PATH` or a
 * plain path is a JSON-lines file; `otlp:URL` is an OTLP/HTTP endpoint (`/v1/logs` appended once);
 * anything else with a scheme is refused with a hint rather than taken for a file name.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either } from "effect"
import { fromConfig } from "../../src/services/ServerConfigEnv.js"
import { describeSink } from "../../src/services/Telemetry.js"

const read = (env: Record<string, string>) =>
  Effect.either(Effect.withConfigProvider(fromConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))

const sinkOf = (value: string | undefined) =>
  Effect.map(read(value === undefined ? {} : { BRAIN_TELEMETRY: value }), (c) => (Either.isRight(c) ? c.right.telemetry : c.left.toString()))

describe("BRAIN_TELEMETRY", () => {
  it.effect("unset or blank drops telemetry; file:PATH and plain paths are JSON-lines files", () =>
    Effect.gen(function*() {
      expect(yield* sinkOf(undefined)).toEqual({ _tag: "None" })
      expect(yield* sinkOf("  ")).toEqual({ _tag: "None" })
      expect(yield* sinkOf("file:/var/log/brain/t.jsonl")).toEqual({ _tag: "File", path: "/var/log/brain/t.jsonl" })
      expect(yield* sinkOf("file:///var/log/brain/t.jsonl")).toEqual({ _tag: "File", path: "/var/log/brain/t.jsonl" })
      expect(yield* sinkOf("file:telemetry.jsonl")).toEqual({ _tag: "File", path: "telemetry.jsonl" })
      expect(yield* sinkOf("/var/log/brain/t.jsonl")).toEqual({ _tag: "File", path: "/var/log/brain/t.jsonl" })
      expect(yield* sinkOf("./t.jsonl")).toEqual({ _tag: "File", path: "./t.jsonl" })
    }))

  it.effect("otlp:URL posts to URL/v1/logs (a URL already ending in /v1/logs is kept as it is)", () =>
    Effect.gen(function*() {
      expect(yield* sinkOf("otlp:http://127.0.0.1:4318")).toEqual({ _tag: "Otlp", url: "http://127.0.0.1:4318/v1/logs" })
      expect(yield* sinkOf("otlp:https://collector.example/otel/")).toEqual({ _tag: "Otlp", url: "https://collector.example/otel/v1/logs" })
      expect(yield* sinkOf("otlp:http://c:4318/v1/logs")).toEqual({ _tag: "Otlp", url: "http://c:4318/v1/logs" })
    }))

  it.effect("a value that names no usable sink is refused with the reason, never taken for a file name", () =>
    Effect.gen(function*() {
      for (const [value, reason] of [
        ["http://127.0.0.1:4318", "for OTLP write otlp:http://127.0.0.1:4318"],
        ["otlp:ftp://x", "otlp: needs an http(s) URL"],
        ["otlp:not a url", "otlp: needs an http(s) URL"],
        ["file:", "file: needs a path"]
      ] as const) {
        const got = yield* sinkOf(value)
        expect(typeof got === "string" && got, value).toContain(reason)
        expect(typeof got === "string" && got, value).toContain("BRAIN_TELEMETRY")
      }
    }))

  it("the startup line says where telemetry goes, without a URL's credentials", () => {
    expect(describeSink({ _tag: "None" })).toContain("dropped")
    expect(describeSink({ _tag: "File", path: "/t.jsonl" })).toBe("telemetry: JSON lines appended to /t.jsonl")
    expect(describeSink({ _tag: "Otlp", url: "http://user:secret@c:4318/v1/logs" })).not.toContain("secret")
  })
})
