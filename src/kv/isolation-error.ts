import { KvfenceError } from '../util/errors.js';
import { ownerLabel, type PageOwner } from './page-owner.js';

/** What a failed I3 check found: enough to write an incident record. */
export interface IsolationViolation {
  reader: PageOwner;
  page: number;
  pageOwner: PageOwner | undefined;
  expectedEpoch: number;
  pageEpoch: number;
  reason: string;
}

export class KvIsolationError extends KvfenceError {
  constructor(readonly violation: IsolationViolation) {
    super(
      'kv_isolation_violation',
      `KV isolation check failed: ${ownerLabel(violation.reader)} may not read page ${violation.page} ` +
        `(owner ${ownerLabel(violation.pageOwner)}, epoch ${violation.pageEpoch}, expected ${violation.expectedEpoch}): ${violation.reason}`,
    );
  }
}
