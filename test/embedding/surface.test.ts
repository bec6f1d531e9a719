/**
 * `brain/effect`'s public surface (src/effect.ts, docs/embedding.md "What it exports"): the values
 * it exports are pinned here by name, so that one removed or renamed is a failing test, not a
 * broken application; the errors building the layer fails with are classes (`instanceof` works as
 * `catchTag` does); and what an application needs to extend Brain — a model provider, a tool
 * that honours its AbortSignal or reports its executor lost, a keyed send — is written with the
 * exported names alone (this file type-checks against them) and runs a turn.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect, ManagedRuntime, Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import * as brain from "../../src/effect.js"
import {
  aborted,
  AgentloopRejected,
  DataDirError,
  EnvironmentBindingsInvalid,
  IdempotencyStoreFailed,
  type KeptRequest,
  type Keyed,
  layer,
  type ModelCall,
  ModelBindingsInvalid,
  ModelFailed,
  ModelRequest,
  ModelResult,
  RegistrationsUnreadable,
  Sessions,
  StartupRefused,
  TelemetrySinkFailed,
  type ToolHandler,
  type ToolInvocation,
  ToolLost,
  type ToolReply,
  type TurnOutcome,
  type TurnRequest
} from "../../src/effect.js"
import { ROOT } from "../support/server.js"

/** Every value `brain/effect` exports at run time. Adding one is a decision of the package's contract: add it here and to docs/embedding.md. */
const VALUES = [
  "AgentloopFailed", "AgentloopRejected", "Agentloops", "Ambiguous", "ApiErrorClasses", "CheckpointStore", "Conflict",
  "CreationFailed", "DataDirError", "EffectFence", "EnvironmentBindings", "EnvironmentBindingsInvalid", "Environments",
  "Event", "Failure", "FailureCode", "FailureCodes", "HostCallFailed", "Hosts", "Idempotency", "IdempotencyStoreFailed",
  "IdempotencyUnavailable", "Internal", "InvalidRequest", "Journal", "JournalCorrupt", "JournalWriteFailed", "LoopFailed",
  "Message", "MethodNotAllowed", "ModelBindings", "ModelBindingsInvalid", "ModelFailed", "ModelRequest", "ModelResult",
  "Models", "NotFound", "Overloaded", "PayloadTooLarge", "Projection", "RegistrationsUnreadable", "ServerConfig", "SessionBusy", "SessionEnded",
  "SessionId", "Sessions", "StartupRefused", "TeardownFailed", "Telemetry", "TelemetrySinkFailed", "ToolLost", "Tools",
  "TurnInput", "Unauthorized", "UnsupportedMediaType", "WasmHost", "aborted", "configDefaults", "configFromEnv",
  "failWith", "failure", "isApiError", "isSessionId", "layer", "mayHaveHadEffects", "serve", "servicesLayer",
  "sharedScheduler", "succeedAfter", "toFailure"
]

describe("brain/effect's surface", () => {
  it("exports exactly the pinned values, none removed or renamed", () => {
    expect(Object.keys(brain).sort()).toEqual([...VALUES].sort())
  })

  it("what building the layer fails with is a class each, so an application's instanceof works as its catchTag does", () => {
    const errors = [
      new DataDirError({ dir: "/d", reason: "r" }),
      new StartupRefused({ reason: "r" }),
      new AgentloopRejected({ reason: "r" }),
      new ModelBindingsInvalid({ source: "BRAIN_MODELS", field: "f", reason: "r" }),
      new EnvironmentBindingsInvalid({ source: "BRAIN_ENVIRONMENTS", field: "f", reason: "r" }),
      new IdempotencyStoreFailed({ reason: "r" }),
      new TelemetrySinkFailed({ reason: "r" }),
      new RegistrationsUnreadable({ file: "/d/hosts/registrations.jsonl", code: "EISDIR" })
    ]
    const classes = [
      DataDirError, StartupRefused, AgentloopRejected, ModelBindingsInvalid, EnvironmentBindingsInvalid, IdempotencyStoreFailed, TelemetrySinkFailed,
      RegistrationsUnreadable
    ]
    errors.forEach((e, i) => {
      expect(e).toBeInstanceOf(classes[i])
      expect(e._tag).toBe(classes[i]!.name)
    })
    // A model provider's and a tool executor's failures too.
    expect(new ModelFailed({ code: "model_unavailable", message: "m", ambiguous: false, retryable: true })).toBeInstanceOf(ModelFailed)
    expect(new ToolLost({ message: "m" })._tag).toBe("ToolLost")
    expect(Schema.isSchema(ModelRequest) && Schema.isSchema(ModelResult)).toBe(true)
  })

  it("every member of StartupError, as the built declarations give the layer's error type, but Effect's ConfigError, is a class brain/effect exports and docs/embedding.md names", () => {
    const declarations = fs.readFileSync(path.join(ROOT, "dist/effect.d.ts"), "utf8")
    const declared = /export declare const layer: .*?=> Layer\.Layer<(.*)>;/.exec(declarations)?.[1]
    expect(declared, "dist/effect.d.ts declares layer's Layer type (build first)").toBeDefined()
    // Layer<ROut, E, RIn>: the error union is the second argument (no member's type has a comma).
    const errors = declared!.split(", ")[1]
    const members = [...(errors ?? "").matchAll(/import\("[^"]+"\)\.(\w+)/g)].map((m) => m[1]!)
    expect(members).toContain("DataDirError")
    const docs = fs.readFileSync(path.join(ROOT, "docs/embedding.md"), "utf8")
    const documented = /\| `DataDirError`[^\n]*/.exec(docs)?.[0] ?? ""
    for (const name of members.filter((n) => n !== "ConfigError")) {
      expect(Object.keys(brain), `${name} is exported by brain/effect`).toContain(name)
      expect(documented, `${name} is in docs/embedding.md's row of StartupError's members`).toContain(`\`${name}\``)
    }
  })

  describe("extending Brain with the exported names alone", () => {
    let dataDir: string
    beforeAll(() => {
      if (!fs.existsSync(path.join(ROOT, "dist/loops/official.wasm"))) throw new Error("build first: npm run build")
      dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-surface-"))
    })
    afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }))

    it("a model provider built on ModelCall, ModelResult and ModelFailed, a tool that reports its executor lost with ToolLost and one that waits on aborted, and a keyed send answered as Keyed, run a turn", async () => {
      const calls: Array<ModelCall["request"]> = []
      // The first call asks for both tools; the second, given their results, fails as a provider would.
      const call = (call: ModelCall): Effect.Effect<ModelResult, ModelFailed> => {
        calls.push(Schema.decodeUnknownSync(ModelRequest)(call.request))
        return call.index === 0
          ? Effect.succeed(Schema.decodeUnknownSync(ModelResult)({
            text: "",
            tool_calls: [{ id: "a", name: "lost", input: {} }, { id: "b", name: "quick", input: {} }],
            stop_reason: "tool_calls"
          }))
          : Effect.fail(new ModelFailed({ code: "model_unavailable", message: "the provider is down", ambiguous: false, retryable: true }))
      }
      const lost: ToolHandler = () => Effect.fail(new ToolLost({ message: "the executor went away" }))
      // Answers at once, or confirms a stop if the call's AbortSignal fired first.
      const quick: ToolHandler = (_input, invocation: ToolInvocation) =>
        invocation.signal.aborted ? Effect.as(aborted(invocation.signal), { outcome: "stopped" } as ToolReply) : Effect.succeed({ outcome: "ok", output: "done" })
      const runtime = ManagedRuntime.make(layer({ dataDir }, { models: { call }, tools: { lost, quick } }))
      try {
        const request: TurnRequest = { key: "k1", hash: "h1" }
        const [first, again, kinds] = await runtime.runPromise(Effect.gen(function*() {
          const sessions = yield* Sessions
          const { session_id } = yield* sessions.create({ model: { provider: "scripted" }, tools: [{ name: "lost" }, { name: "quick" }] })
          const first: Keyed<TurnOutcome> = yield* sessions.sendKeyed(session_id, { message: "go" }, request)
          const again: Keyed<TurnOutcome> = yield* sessions.sendKeyed(session_id, { message: "go" }, request)
          const page = yield* sessions.events(session_id, { after: 0, limit: 100 })
          yield* sessions.end(session_id)
          const kept: Array<KeptRequest> = []
          yield* sessions.delete(session_id, (requests) => Effect.sync(() => kept.push(...requests)))
          return [first, again, [...page.events.map((e) => e.kind), `kept ${kept.map((k) => k.key).join(",")}`]] as const
        }))
        expect(first._tag).toBe("Answered")
        expect(again).toEqual(first)
        if (first._tag !== "Answered") return
        expect(first.value.turn.status).toBe("failed")
        expect(first.value.turn.failure?.code).toBe("model_unavailable")
        expect(kinds).toContain("tool_call_failed")
        expect(kinds).toContain("tool_call_ended")
        expect(kinds.at(-1)).toBe("kept k1")
        expect(calls).toHaveLength(2)
      } finally {
        await runtime.dispose()
      }
    }, 120_000)
  })
})
