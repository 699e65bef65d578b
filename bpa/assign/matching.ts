/**
 * Minimum-cost bipartite matching of rows (roles) to columns (hosts) on a sparse graph:
 * successive shortest augmenting paths, Dijkstra with vertex potentials (the
 * Hungarian method's primal-dual form). Every row is tried in order; a row that has no
 * augmenting path is left unmatched, and then (Berge/Kuhn) no matching covers all rows.
 * When all rows are matched, the total cost is minimal.
 *
 * Costs must be non-negative. Ties are broken by the lower column index, so the result is
 * a pure function of the input order.
 */

export interface Edge {
  col: number;
  cost: number;
}

export interface MatchingResult {
  /** rowToCol[r] = matched column, or -1. */
  rowToCol: Int32Array;
  /** colToRow[c] = matched row, or -1. */
  colToRow: Int32Array;
  /** Rows for which no augmenting path existed. */
  unmatchedRows: number[];
  totalCost: number;
}

/** A binary min-heap of (key, col) pairs ordered by key then col. */
class Heap {
  private keys: number[] = [];
  private cols: number[] = [];
  get size(): number {
    return this.keys.length;
  }
  private less(a: number, b: number): boolean {
    const ka = this.keys[a]!;
    const kb = this.keys[b]!;
    return ka < kb || (ka === kb && this.cols[a]! < this.cols[b]!);
  }
  private swap(a: number, b: number): void {
    [this.keys[a], this.keys[b]] = [this.keys[b]!, this.keys[a]!];
    [this.cols[a], this.cols[b]] = [this.cols[b]!, this.cols[a]!];
  }
  push(key: number, col: number): void {
    this.keys.push(key);
    this.cols.push(col);
    let i = this.keys.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.less(i, parent)) break;
      this.swap(i, parent);
      i = parent;
    }
  }
  pop(): [number, number] {
    const top: [number, number] = [this.keys[0]!, this.cols[0]!];
    const lastKey = this.keys.pop()!;
    const lastCol = this.cols.pop()!;
    if (this.keys.length > 0) {
      this.keys[0] = lastKey;
      this.cols[0] = lastCol;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < this.keys.length && this.less(l, m)) m = l;
        if (r < this.keys.length && this.less(r, m)) m = r;
        if (m === i) break;
        this.swap(i, m);
        i = m;
      }
    }
    return top;
  }
}

export function minCostMatching(adjacency: readonly (readonly Edge[])[], columnCount: number): MatchingResult {
  const rows = adjacency.length;
  const rowToCol = new Int32Array(rows).fill(-1);
  const colToRow = new Int32Array(columnCount).fill(-1);
  const u = new Float64Array(rows); // row potentials
  const v = new Float64Array(columnCount); // column potentials
  const dist = new Float64Array(columnCount);
  const prevRow = new Int32Array(columnCount);
  const done = new Uint8Array(columnCount);
  const rowDist = new Float64Array(rows);
  const unmatchedRows: number[] = [];
  // Columns and rows touched in one phase, to reset in O(touched) instead of O(columns).
  const touchedCols: number[] = [];
  const finalizedCols: number[] = [];
  const visitedRows: number[] = [];

  for (let c = 0; c < columnCount; c++) dist[c] = Infinity;

  for (let s = 0; s < rows; s++) {
    const heap = new Heap();
    touchedCols.length = 0;
    finalizedCols.length = 0;
    visitedRows.length = 0;
    rowDist[s] = 0;
    visitedRows.push(s);

    const relax = (row: number, base: number): void => {
      for (const { col, cost } of adjacency[row]!) {
        if (done[col]) continue;
        const d = base + cost - u[row]! - v[col]!;
        if (d < dist[col]!) {
          if (dist[col] === Infinity) touchedCols.push(col);
          dist[col] = d;
          prevRow[col] = row;
          heap.push(d, col);
        }
      }
    };
    relax(s, 0);

    let sink = -1;
    let sinkDist = 0;
    while (heap.size > 0) {
      const [d, col] = heap.pop();
      if (done[col] || d > dist[col]!) continue; // stale entry
      done[col] = 1;
      finalizedCols.push(col);
      const owner = colToRow[col]!;
      if (owner === -1) {
        sink = col;
        sinkDist = d;
        break;
      }
      rowDist[owner] = d;
      visitedRows.push(owner);
      relax(owner, d);
    }

    if (sink === -1) {
      unmatchedRows.push(s);
    } else {
      // Potentials: keep reduced costs >= 0 and matched edges tight (see module comment).
      for (const r of visitedRows) u[r] = u[r]! + (sinkDist - rowDist[r]!);
      for (const c of finalizedCols) v[c] = v[c]! - (sinkDist - dist[c]!);
      // Augment along the path back to s.
      let col = sink;
      for (;;) {
        const row = prevRow[col]!;
        const next = rowToCol[row]!;
        rowToCol[row] = col;
        colToRow[col] = row;
        if (row === s) break;
        col = next;
      }
    }
    for (const c of touchedCols) {
      dist[c] = Infinity;
      done[c] = 0;
    }
  }

  let totalCost = 0;
  for (let r = 0; r < rows; r++) {
    const col = rowToCol[r]!;
    if (col === -1) continue;
    const edge = adjacency[r]!.find((e) => e.col === col)!;
    totalCost += edge.cost;
  }
  return { rowToCol, colToRow, unmatchedRows, totalCost };
}
