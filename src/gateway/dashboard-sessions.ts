/**
 * The dashboard's browser sessions. A browser cannot send a bearer header on a plain page load, so the admin token is
 * presented once (the login form, or `?token=`) and traded for a random session id in an HttpOnly, SameSite=Strict
 * cookie scoped to /dashboard: the page never holds the token, and its script cannot read the cookie. Sessions live
 * in memory (a restart logs everyone out), expire, and are bounded: a new one past the bound evicts the oldest.
 */
import { randomBytes } from 'node:crypto';

export const SESSION_COOKIE = 'kvfence_dashboard';
/** how long a login lasts */
export const SESSION_TTL_MS = 12 * 3600 * 1000;
/** sessions held at once; more evict the oldest */
const SESSIONS_MAX = 64;

export class DashboardSessions {
  /** id → expiry (ms); a Map keeps insertion order, so the first entry is the oldest */
  private readonly sessions = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  /** A new session id (256 random bits, hex). */
  create(): string {
    this.sweep();
    while (this.sessions.size >= SESSIONS_MAX) this.sessions.delete(this.sessions.keys().next().value!);
    const id = randomBytes(32).toString('hex');
    this.sessions.set(id, this.now() + SESSION_TTL_MS);
    return id;
  }

  /** Whether a request's Cookie header holds a live session. */
  valid(cookieHeader: string | undefined): boolean {
    const id = cookieValue(cookieHeader, SESSION_COOKIE);
    if (id === undefined) return false;
    const expiry = this.sessions.get(id);
    if (expiry === undefined) return false;
    if (expiry > this.now()) return true;
    this.sessions.delete(id);
    return false;
  }

  get size(): number {
    return this.sessions.size;
  }

  private sweep(): void {
    const now = this.now();
    for (const [id, expiry] of this.sessions) if (expiry <= now) this.sessions.delete(id);
  }
}

/** The Set-Cookie value for a new session: no script can read it, no other site can send it. */
export function sessionCookie(id: string): string {
  return `${SESSION_COOKIE}=${id}; Path=/dashboard; HttpOnly; SameSite=Strict; Max-Age=${SESSION_TTL_MS / 1000}`;
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  if (header === undefined || header.length > 8192) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}
