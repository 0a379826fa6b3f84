package hc

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// TestWarmStartCoversTheProtocol: the standby's warm-up initialises every
// message type of the coordinator's protocol package, nested ones
// included, and no other.
func TestWarmStartCoversTheProtocol(t *testing.T) {
	want := 0
	var count func(protoreflect.MessageDescriptors)
	count = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			if !ms.Get(i).IsMapEntry() {
				want++
			}
			count(ms.Get(i).Messages())
		}
	}
	protoregistry.GlobalFiles.RangeFilesByPackage("lazaret.v1", func(f protoreflect.FileDescriptor) bool {
		count(f.Messages())
		return true
	})
	if want == 0 {
		t.Fatal("no message of package lazaret.v1 is registered")
	}
	if got := warmStart(); got != want {
		t.Fatalf("warmStart initialised %d message types, the protocol package has %d", got, want)
	}
}
