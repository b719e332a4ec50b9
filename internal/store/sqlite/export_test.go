package sqlite

import "context"

// ExecForTest runs a raw statement, for tests that shape old rows.
func (s *Store) ExecForTest(ctx context.Context, q string, args ...any) error {
	_, err := s.db.ExecContext(ctx, q, args...)
	return err
}
