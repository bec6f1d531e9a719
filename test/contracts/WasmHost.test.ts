/**
 * The WasmHost contract run against the worker-thread host: built by `make` with one worker, and
 * through its layer (the WasmHost Tag, limits from ServerConfig) with two — so the suite sees a
 * pool that must queue and replace its only thread, and one that shares work between threads —
 * and with activations on the main thread (BRAIN_WASM_INLINE_MS), moved to its one-worker pool
 * past 50 ms of compute: the spinning guests of the budget tests run there; and on worker threads
 * with each module's twin made at admission, so every activation runs pinned (wasm/Pinned.ts): its
 * host calls unwind it and its thread serves others meanwhile.
 */
import { Context, Effect, Layer } from "effect"
import * as WasmHostWorkers from "../../src/layers/WasmHostWorkers.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { WasmHost } from "../../src/services/WasmHost.js"
import { type MakeWasmHost, wasmHostContract } from "./WasmHost.contract.js"

wasmHostContract("worker threads, 1 worker (make)", {
  workers: 1,
  make: ((limits) => WasmHostWorkers.make({ workers: 1, ...limits })) satisfies MakeWasmHost
})

wasmHostContract("worker threads, 2 workers (the layer, limits from ServerConfig)", {
  workers: 2,
  make: ((limits) =>
    Layer.build(WasmHostWorkers.layer.pipe(Layer.provide(ServerConfig.layerWith({
      wasmWorkers: 2,
      wasmInlineMs: 0,
      maxWasmMemoryBytes: limits.memoryBytes,
      maxWasmComputeMs: limits.computeMs,
      maxWasmIoBytes: limits.ioBytes,
      maxWasmModuleBytes: limits.moduleBytes
    })))).pipe(Effect.map(Context.get(WasmHost)))) satisfies MakeWasmHost
})

wasmHostContract("the main thread, moved to 1 worker past 50 ms (make)", {
  workers: 1,
  inline: true,
  make: ((limits) => WasmHostWorkers.make({ workers: 1, inlineMs: 50, inlineAtAdmission: true, ...limits })) satisfies MakeWasmHost
})

wasmHostContract("worker threads, pinned: each module's twin ready at admission, 1 worker (make)", {
  workers: 1,
  make: ((limits) => WasmHostWorkers.make({ workers: 1, inlineMs: 0, inlineAtAdmission: true, ...limits })) satisfies MakeWasmHost
})
