/**
 * The session runtime assembled for tests, by the server's own composition (src/Composition.ts):
 * Sessions over a memory or file journal, the scripted model (optionally wrapped to record what it
 * was asked), in-process tools and loops.
 */
import { Deferred, Effect, Exit, FiberId, Layer } from "effect"
import { sessionServices } from "../../src/Composition.js"
import * as AgentloopsModules from "../../src/layers/AgentloopsModules.js"
import type { ModuleStoreShape } from "../../src/layers/agentloops/ModuleStore.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import * as ModelsScripted from "../../src/layers/ModelsScripted.js"
import type * as ToolsInProcess from "../../src/layers/ToolsInProcess.js"
import * as WasmHostWorkers from "../../src/layers/WasmHostWorkers.js"
import { WasmHost, type WasmHostShape } from "../../src/services/WasmHost.js"
import * as FileDriver from "../../src/layers/journal/FileDriver.js"
import { Agentloops, type AgentloopShape, type AgentloopsShape } from "../../src/services/Agentloop.js"
import { Journal, type JournalShape } from "../../src/services/Journal.js"
import { type ModelCall, Models, type ModelsShape } from "../../src/services/Models.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { ModelBindings, type ModelBindingsShape, noBindings } from "../../src/services/ModelBindings.js"
import { Telemetry, type TelemetryShape } from "../../src/services/Telemetry.js"
import { NodeHttpClient } from "@effect/platform-node"
import type { EnvironmentBindings as Bindings } from "../../src/domain/Environment.js"
import * as EnvironmentsHttp from "../../src/layers/EnvironmentsHttp.js"
import { EnvironmentBindings, type Environments, Environments as EnvironmentsTag } from "../../src/services/Environments.js"
import * as EnvironmentsHost from "../../src/layers/EnvironmentsHost.js"
import * as HostsFile from "../../src/layers/HostsFile.js"
import { Hosts } from "../../src/services/Hosts.js"
import type { SessionId } from "../../src/domain/Ids.js"
import { Sessions } from "../../src/services/Sessions.js"

export interface RuntimeOptions {
  readonly journal?: "memory" | { readonly dataDir: string } | Layer.Layer<Journal>
  readonly tools?: Readonly<Record<string, ToolsInProcess.ToolHandler>>
  readonly loops?: Readonly<Record<string, AgentloopShape>>
  readonly config?: Partial<ServerConfig.ServerConfigShape>
  /** The loops as the runtime sees them, made from the real ones (to slow or watch their resolution). */
  readonly agentloops?: (loops: AgentloopsShape) => AgentloopsShape
  /** Receives every model call before the scripted provider answers it. */
  readonly onModelCall?: (call: ModelCall) => void
  readonly models?: ModelsShape
  /** Named model bindings the Sessions service resolves at create (none by default). */
  readonly bindings?: ModelBindingsShape
  /** Runs a WebAssembly host with these limits: uploaded modules and Wasm tools work (in memory). */
  readonly wasm?: WasmHostWorkers.WasmHostOptions
  /** With `wasm`: the host as the runtime sees it, made from the real one (to watch what it runs). */
  readonly wasmHost?: (host: WasmHostShape) => WasmHostShape
  /** With `wasm`: the official loop runs as this module (dist/loops/official.wasm), not in TypeScript. */
  readonly officialModule?: Uint8Array
  /** With `wasm`: where uploaded modules are kept (in memory without it), and their bound in bytes. */
  readonly modules?: { readonly store?: ModuleStoreShape; readonly storeBytes?: number; readonly cacheBytes?: number }
  /** Where loops' and tools' telemetry goes (dropped without one). */
  readonly telemetry?: TelemetryShape
  /**
   * Environments: a driver layer, or the http driver over undici with these bindings (what a
   * create body's `binding` may name). Without it, no bindings are configured.
   */
  readonly environments?:
    | { readonly layer: Layer.Layer<Environments>; readonly bindings?: Bindings }
    | { readonly bindings: Bindings; readonly maxResponseBytes?: number }
  /**
   * A host registry (in memory, or over `dataDir`) and the `host` driver beside the http one (if
   * `environments` gives the http driver's bindings).
   */
  readonly hosts?: { readonly dataDir?: string; readonly heartbeatMs?: number }
}

const environmentsLayer = (
  choice: RuntimeOptions["environments"],
  config: Partial<ServerConfig.ServerConfigShape>,
  hostsChoice: RuntimeOptions["hosts"]
) => {
  if (hostsChoice !== undefined) {
    const hosts = HostsFile.layer({
      dataDir: hostsChoice.dataDir,
      graceMs: config.cancelGraceMs ?? ServerConfig.defaults.cancelGraceMs,
      heartbeatMs: hostsChoice.heartbeatMs ?? 0,
      maxResultBytes: config.maxEnvironmentResponseBytes ?? ServerConfig.defaults.maxEnvironmentResponseBytes,
      idleExpiryMs: config.hostIdleExpiryMs ?? ServerConfig.defaults.hostIdleExpiryMs
    })
    const http = choice !== undefined && !("layer" in choice)
      ? EnvironmentsHttp.make({
        bindings: choice.bindings,
        maxResponseBytes: choice.maxResponseBytes ?? ServerConfig.defaults.maxEnvironmentResponseBytes,
        graceMs: config.cancelGraceMs ?? ServerConfig.defaults.cancelGraceMs
      })
      : Effect.succeed(undefined)
    const driver = Layer.effect(
      EnvironmentsTag,
      Effect.gen(function*() {
        return EnvironmentsHost.byDriver({ http: yield* http, host: EnvironmentsHost.make(yield* Hosts) })
      })
    ).pipe(Layer.provide(NodeHttpClient.dispatcherLayer))
    const bindings = Layer.succeed(EnvironmentBindings, choice?.bindings ?? { names: [], get: () => undefined })
    return Layer.merge(driver, bindings).pipe(Layer.provideMerge(hosts))
  }
  if (choice === undefined) return Layer.empty
  const bindings = Layer.succeed(EnvironmentBindings, choice.bindings ?? { names: [], get: () => undefined })
  const driver = "layer" in choice
    ? choice.layer
    : EnvironmentsHttp.layer({
      bindings: choice.bindings,
      maxResponseBytes: choice.maxResponseBytes ?? ServerConfig.defaults.maxEnvironmentResponseBytes,
      graceMs: config.cancelGraceMs ?? ServerConfig.defaults.cancelGraceMs
    }).pipe(Layer.provide(NodeHttpClient.dispatcherLayer))
  return Layer.merge(driver, bindings)
}

export const journalLayer = (choice: RuntimeOptions["journal"]): Layer.Layer<Journal, unknown> =>
  choice === undefined || choice === "memory"
    ? JournalMemory.layer
    : "dataDir" in choice
    ? JournalFile.layerNode({ dataDir: choice.dataDir })
    : choice

/**
 * Loops whose resolution can be held (for `RuntimeOptions.agentloops`): once `hold(n)` is called,
 * the next `n` resolutions each wait until all `n` are waiting, then go on together; every turn
 * start among them is then between its checks of the session's state and its claim at once.
 */
export const heldResolution = () => {
  let held: { readonly n: number; waiting: number; readonly gate: Deferred.Deferred<void> } | undefined
  return {
    hold: (n: number) => {
      held = { n, waiting: 0, gate: Deferred.unsafeMake<void>(FiberId.none) }
    },
    wrap: (loops: AgentloopsShape): AgentloopsShape => ({
      ...loops,
      resolve: (loop) =>
        Effect.suspend(() => {
          const h = held
          if (h === undefined) return loops.resolve(loop)
          if (++h.waiting === h.n) {
            held = undefined
            Deferred.unsafeDone(h.gate, Exit.void)
          }
          return Effect.zipRight(Deferred.await(h.gate), loops.resolve(loop))
        })
    })
  }
}

/** The loops' layer, its service wrapped by `wrap` if given. */
const wrapAgentloops = <E, R>(loops: Layer.Layer<Agentloops, E, R>, wrap: RuntimeOptions["agentloops"]) =>
  wrap === undefined ? loops : Layer.effect(Agentloops, Effect.map(Agentloops, wrap)).pipe(Layer.provide(loops))

/** The server's own composition (src/Composition.ts) with the parts a test chooses. */
export const runtimeLayer = (options: RuntimeOptions = {}) => {
  const base = options.models ?? ModelsScripted.scripted
  const models: ModelsShape = {
    call: (call) => Effect.suspend(() => {
      options.onModelCall?.(call)
      return base.call(call)
    })
  }
  return sessionServices({
    config: { ...ServerConfig.defaults, ...options.config },
    journal: journalLayer(options.journal),
    checkpoints: options.journal && typeof options.journal === "object" && "dataDir" in options.journal
      ? CheckpointStore.layerFile(options.journal.dataDir).pipe(Layer.provide(FileDriver.layerNode))
      : CheckpointStore.layerMemory,
    base: Layer.succeed(ModelBindings, options.bindings ?? noBindings),
    models: Layer.succeed(Models, models),
    wasm: options.wasm
      ? Layer.scoped(WasmHost, Effect.map(WasmHostWorkers.make(options.wasm), (host) => options.wasmHost?.(host) ?? host))
      : Layer.empty,
    agentloops: wrapAgentloops(
      AgentloopsModules.layer({
        loops: options.loops ?? {},
        ...(options.officialModule ? { officialModule: options.officialModule } : {}),
        ...(options.modules?.store ? { store: options.modules.store } : {}),
        ...(options.modules?.storeBytes !== undefined ? { storeBytes: options.modules.storeBytes } : {}),
        ...(options.modules?.cacheBytes !== undefined ? { cacheBytes: options.modules.cacheBytes } : {})
      }),
      options.agentloops
    ),
    tools: options.tools ?? {},
    beside: Layer.merge(
      options.telemetry ? Layer.succeed(Telemetry, options.telemetry) : Layer.empty,
      environmentsLayer(options.environments, options.config ?? {}, options.hosts)
    )
  })
}

export type { JournalShape }

/** Milliseconds of wall time `untilIdle` waits at most: a hang guard, which the TestClock does not move. */
const IDLE_DEADLINE_MS = 30_000

/** Fails as a defect once IDLE_DEADLINE_MS of wall time have passed (a timer of Node's, not the test's clock). */
const idleDeadline = (sessions: ReadonlyArray<SessionId>) =>
  Effect.async<never>((resume) => {
    const timer = setTimeout(
      () => resume(Effect.dieMessage(`sessions still running after ${IDLE_DEADLINE_MS} ms: ${sessions.join(", ")}`)),
      IDLE_DEADLINE_MS
    )
    return Effect.sync(() => clearTimeout(timer))
  })

/**
 * Waits until none of `sessions` runs a turn, and each turn that ran has closed: a test's "until
 * idle" (not Sessions.drain, which is a stop's: once it has begun, Sessions admits no new work).
 * It waits on each turn's own signal that it has closed (`Sessions.whenIdle`: the session's claim,
 * its working memory and its cell given back, the release over), not on the status, which reads
 * idle once the closing records are in, before the release; and fails as a defect past
 * IDLE_DEADLINE_MS of wall time, so it works under the TestClock too.
 */
export const untilIdle = (...sessions: ReadonlyArray<SessionId>) =>
  Effect.flatMap(Sessions, (service) =>
    Effect.raceFirst(
      Effect.forEach(sessions, (id) => service.whenIdle(id), { concurrency: "unbounded", discard: true }),
      idleDeadline(sessions)
    ))
