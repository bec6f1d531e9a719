import * as fs from "node:fs"
import { Effect, Layer } from "effect"
import { admitModule } from "../../src/layers/wasm/Module.js"
import { Pool } from "../../src/layers/wasm/Pool.js"
import { tempDir } from "../support/journals.js"
import { relayed, relayGuest } from "../support/relay.js"
import { runtimeLayer } from "../support/runtime.js"
import { wat } from "../support/wat.js"
import { agentloopHostContract } from "./Agentloop.contract.js"

agentloopHostContract("memory journal", (options) => runtimeLayer({ ...options, journal: "memory" }))
agentloopHostContract("file journal", (options) =>
  Layer.unwrapScoped(Effect.map(tempDir("brain-agentloop-"), (dataDir) => runtimeLayer({ ...options, journal: { dataDir } }))))

/** Limits of the relay's activations: generous, the contract's loops are small. */
const LIMITS = { computeMs: 10_000, ioBytes: 16 * 1024 * 1024, memoryBytes: 64 * 1024 * 1024 }

/** The official loop as `npm run build` compiles it from loops/official (AssemblyScript). */
const OFFICIAL = new URL("../../dist/loops/official.wasm", import.meta.url)

// The same loops behind the WebAssembly host: every host call crosses the ABI (test/support/relay.ts),
// and the official loop is the AssemblyScript one.
agentloopHostContract("WebAssembly host (every host call relayed through a guest; the official loop in Wasm)", (options) =>
  Layer.unwrapScoped(
    Effect.gen(function*() {
      const pool = new Pool(2)
      yield* Effect.addFinalizer(() => pool.close)
      const bytes = yield* Effect.promise(() => wat(relayGuest))
      const module = yield* Effect.orDie(admitModule(bytes, { maxModuleBytes: 1 << 20, maxMemoryBytes: LIMITS.memoryBytes }))
      const loops = Object.fromEntries(Object.entries(options.loops ?? {}).map(([name, loop]) => [name, relayed(loop, module, pool, LIMITS)]))
      return runtimeLayer({
        ...options,
        loops,
        journal: "memory",
        wasm: { ...LIMITS, workers: 2, moduleBytes: 1 << 20 },
        officialModule: new Uint8Array(fs.readFileSync(OFFICIAL))
      })
    })
  ))
