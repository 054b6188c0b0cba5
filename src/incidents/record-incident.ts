/**
 * What every worker does when an isolation check fails (DESIGN I3): the durable record first (the store writes
 * synchronously), then the log line, then listeners (the gateway's counter). The client hears of the failure after.
 */
import type { IsolationIncident } from '../engine/request.js';
import { ownerLabel } from '../kv/page-owner.js';
import { errorMessage } from '../util/errors.js';
import type { LogSink } from '../util/log.js';
import type { IncidentStore } from './incident-store.js';

export function recordIncident(store: IncidentStore, log: LogSink, incident: IsolationIncident): void {
  const v = incident.violation;
  let id: number | undefined;
  try {
    id = store.record(incident);
  } catch (error) {
    log.error(
      { tenant: incident.tenant, request: incident.request, err: errorMessage(error) },
      'could not write the incident record',
    );
  }
  log.error(
    {
      tenant: incident.tenant,
      request: incident.request,
      incident: id,
      page: v.page,
      pageOwner: ownerLabel(v.pageOwner),
      reason: v.reason,
    },
    'KV isolation check failed; request aborted',
  );
}
