import { describeBackendConformance } from '../../test/helpers/backend-conformance.js';
import { ReferenceBackend } from './reference-backend.js';

describeBackendConformance({ name: 'reference (TypeScript)', make: () => new ReferenceBackend() });
