/**
 * The durable record of isolation incidents (DESIGN I3): one row per failed ownership check, written before the
 * client hears of the failure. SQLite through better-sqlite3: embedded (no server to run), synchronous (the row is on
 * disk when `record` returns, so nothing awaits between the check and the record), and crash-safe with WAL +
 * synchronous=FULL (a committed row survives the process being killed right after).
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type { IsolationIncident } from '../engine/request.js';

export interface IncidentRecord {
  id: number;
  timeMs: number;
  request: string;
  tenant: string;
  page: number;
  pageOwnerTenant: string | null;
  pageOwnerRequest: string | null;
  pageEpoch: number;
  expectedEpoch: number;
  reason: string;
}

interface IncidentRow {
  id: number;
  time_ms: number;
  request: string;
  tenant: string;
  page: number;
  page_owner_tenant: string | null;
  page_owner_request: string | null;
  page_epoch: number;
  expected_epoch: number;
  reason: string;
}

const SCHEMA = `CREATE TABLE IF NOT EXISTS incidents (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  time_ms INTEGER NOT NULL,
  request TEXT NOT NULL,
  tenant TEXT NOT NULL,
  page INTEGER NOT NULL,
  page_owner_tenant TEXT,
  page_owner_request TEXT,
  page_epoch INTEGER NOT NULL,
  expected_epoch INTEGER NOT NULL,
  reason TEXT NOT NULL
)`;

export class IncidentStore {
  private readonly db: Database.Database;
  private readonly insert: Database.Statement<
    [number, string, string, number, string | null, string | null, number, number, string]
  >;

  constructor(readonly path: string) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.db = new Database(path);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = FULL');
    this.db.exec(SCHEMA);
    this.insert = this.db.prepare(
      'INSERT INTO incidents (time_ms, request, tenant, page, page_owner_tenant, page_owner_request, page_epoch, expected_epoch, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );
  }

  /** Writes one incident durably; returns its id. */
  record(incident: IsolationIncident): number {
    const v = incident.violation;
    const result = this.insert.run(
      incident.timeMs,
      incident.request,
      incident.tenant,
      v.page,
      v.pageOwner?.tenant ?? null,
      v.pageOwner?.request ?? null,
      v.pageEpoch,
      v.expectedEpoch,
      v.reason,
    );
    return Number(result.lastInsertRowid);
  }

  /** Most recent first, at most `limit`. */
  list(limit = 1000): IncidentRecord[] {
    const rows = this.db.prepare('SELECT * FROM incidents ORDER BY id DESC LIMIT ?').all(limit) as IncidentRow[];
    return rows.map((r) => ({
      id: r.id,
      timeMs: r.time_ms,
      request: r.request,
      tenant: r.tenant,
      page: r.page,
      pageOwnerTenant: r.page_owner_tenant,
      pageOwnerRequest: r.page_owner_request,
      pageEpoch: r.page_epoch,
      expectedEpoch: r.expected_epoch,
      reason: r.reason,
    }));
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
