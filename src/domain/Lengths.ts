/**
 * The transcript's length after each change, as (sequence, length) pairs in sequence order: an
 * append-only log that successive folded states share.
 *
 * Appending to the newest view adds to the shared arrays in place and answers a view one longer;
 * appending to an older view (a fold from a state that was already extended) copies its prefix
 * first. So no view ever changes, and a linear fold appends in O(1). Two flat arrays of small
 * integers, where a persistent Chunk of pairs kept a node, a pair and a property array per
 * append: about 4 KiB per session of 20 turns (docs/benchmarks.md, "Memory per warm session").
 */
export class Lengths {
  static readonly empty = new Lengths([], [], 0)

  readonly #sequences: Array<number>
  readonly #lengths: Array<number>
  /** The pairs this view holds. */
  readonly size: number

  private constructor(sequences: Array<number>, lengths: Array<number>, size: number) {
    this.#sequences = sequences
    this.#lengths = lengths
    this.size = size
  }

  static fromPairs(pairs: Iterable<readonly [number, number]>): Lengths {
    const sequences: Array<number> = []
    const lengths: Array<number> = []
    for (const [sequence, length] of pairs) {
      sequences.push(sequence)
      lengths.push(length)
    }
    return new Lengths(sequences, lengths, sequences.length)
  }

  /** This view and one more pair (its sequence after every other). */
  append(sequence: number, length: number): Lengths {
    if (this.#sequences.length === this.size) {
      this.#sequences.push(sequence)
      this.#lengths.push(length)
      return new Lengths(this.#sequences, this.#lengths, this.size + 1)
    }
    // A later view shares the arrays past this one's end: copy, so that view stays as it is.
    const sequences = this.#sequences.slice(0, this.size)
    const lengths = this.#lengths.slice(0, this.size)
    sequences.push(sequence)
    lengths.push(length)
    return new Lengths(sequences, lengths, this.size + 1)
  }

  /** The length of the last pair at or before `sequence` (0 before the first). */
  at(sequence: number): number {
    let lo = 0
    let hi = this.size - 1
    let found = 0
    while (lo <= hi) {
      const mid = (lo + hi) >> 1
      if (this.#sequences[mid]! <= sequence) {
        found = this.#lengths[mid]!
        lo = mid + 1
      } else hi = mid - 1
    }
    return found
  }

  /** The sequence of the last pair whose length is at most `length` (0 when none is): from the end, so a recent one costs little. */
  lastAtMost(length: number): number {
    for (let i = this.size - 1; i >= 0; i--) if (this.#lengths[i]! <= length) return this.#sequences[i]!
    return 0
  }

  toArray(): Array<readonly [number, number]> {
    const out: Array<readonly [number, number]> = []
    for (let i = 0; i < this.size; i++) out.push([this.#sequences[i]!, this.#lengths[i]!])
    return out
  }
}
