package postgres_test

import (
	"testing"

	"github.com/zeish/zeish/internal/store/storetest"
)

func BenchmarkList(b *testing.B) { storetest.BenchmarkList(b, open(b, server(b).NewDatabase(b))) }
