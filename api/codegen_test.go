package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	// The generated client imports these; importing them here keeps them
	// in go.mod as test dependencies, so the client builds inside the
	// module.
	_ "github.com/oapi-codegen/runtime"
	_ "go.yaml.in/yaml/v3"

	"github.com/paysvc/paysvc/api"
	"github.com/paysvc/paysvc/lab/kit/apitest"
)

// clientUse is compiled with the generated client: it holds the types the
// document promises to generated clients. Amounts and versions are 64-bit
// (the contract allows 10^12; a 32-bit integer overflows at 2^31), problem
// codes and statuses are typed, and the callback event is a union with a
// discriminator.
const clientUse = `package paysvcclient

func _() {
	var o Order
	var _ int64 = o.Amount
	var _ int64 = o.RefundedAmount
	var _ int64 = o.PendingRefundAmount
	var _ int64 = o.Version
	var r Refund
	var _ int64 = r.Amount
	var _ int64 = PaymentEventData{}.Amount

	var p CreateOrderConflictProblem
	var _ string = string(p.Code)
	var _ int = int(p.Status)
	p.Code = CreateOrderConflictProblemCodeOrderExists

	var ev HandledCallbackEvent
	_ = ev.FromPaymentSucceededEvent(PaymentSucceededEvent{Data: PaymentEventData{Amount: 1_000_000_000_000}})
	if d, err := ev.Discriminator(); err != nil || d != "payment.succeeded" {
		panic(d)
	}
	if v, err := ev.ValueByDiscriminator(); err == nil {
		_ = v.(PaymentSucceededEvent)
	}
	var any CallbackEvent
	_ = any.FromHandledCallbackEvent(ev)
	_ = any.FromUnhandledCallbackEvent(UnhandledCallbackEvent{Type: "charge.dispute.created"})

	var rp RefundConflictProblem
	rp.Code = RefundConflictProblemCodeRefundExists
	_ = CreateRefundRequest{Amount: 500, MerchantRefundNo: "A-1005-R1"}
	_ = Refund{}.MerchantRefundNo
	var res CallbackResult
	_ = res.FromCallbackUnhandled(CallbackUnhandled{Result: Unhandled})
	_, _ = res.AsCallbackOutcome()
}
`

// TestGeneratedClientCompiles generates a Go client from api/openapi.yaml
// with oapi-codegen (the go.mod tool), then builds and vets it together
// with clientUse, and refuses untyped (interface{}) struct fields in it.
//
// The first run builds the generator (about half a minute on two cores);
// later runs take it from the build cache.
func TestGeneratedClientCompiles(t *testing.T) {
	t.Parallel()
	// Inside the module (so go.mod's requirements apply), in a directory
	// that ./... patterns skip.
	dir, err := os.MkdirTemp(".", "_gen")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dir, _ = filepath.Abs(dir)

	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	gen := filepath.Join(dir, "client.gen.go")
	spec, _ := filepath.Abs("openapi.yaml")
	run("go", "tool", "oapi-codegen", "-generate", "types,client", "-package", "paysvcclient", "-o", gen, spec)
	// No struct field of the generated client may be untyped: that is
	// what allOf overrides of a property, or a property without a type,
	// turn into.
	f, err := parser.ParseFile(token.NewFileSet(), gen, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return true
		}
		for _, fl := range st.Fields.List {
			if untyped(fl.Type) {
				for _, name := range fl.Names {
					t.Errorf("generated client: %s.%s is untyped (interface{})", ts.Name.Name, name.Name)
				}
			}
		}
		return true
	})

	if err := os.WriteFile(filepath.Join(dir, "use.go"), []byte(clientUse), 0o644); err != nil {
		t.Fatal(err)
	}
	run("go", "build", ".")
	run("go", "vet", ".")
}

func untyped(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.InterfaceType:
		return len(e.Methods.List) == 0
	case *ast.Ident:
		return e.Name == "any"
	case *ast.StarExpr:
		return untyped(e.X)
	}
	return false
}

// TestComponentsAreUsed: every component of the document is referred to.
// A component nobody refers to is either a promise no operation keeps or
// dead text; the router's own answers are referred to by the validator
// (lab/kit/apitest) by name.
func TestComponentsAreUsed(t *testing.T) {
	doc := loadSpec(t)
	byName := map[string]bool{
		"responses/" + apitest.RouteNotFoundResponse:    true,
		"responses/" + apitest.MethodNotAllowedResponse: true,
	}
	spec := string(api.Spec)
	check := func(kind string, names []string) {
		for _, name := range names {
			if byName[kind+"/"+name] {
				continue
			}
			if !strings.Contains(spec, "'#/components/"+kind+"/"+name+"'") {
				t.Errorf("components/%s/%s is not used: use it or drop it", kind, name)
			}
		}
	}
	check("responses", slices.Collect(maps.Keys(doc.Components.Responses)))
	check("schemas", slices.Collect(maps.Keys(doc.Components.Schemas)))
	check("parameters", slices.Collect(maps.Keys(doc.Components.Parameters)))
	check("headers", slices.Collect(maps.Keys(doc.Components.Headers)))
	for name := range byName {
		kind, n, _ := strings.Cut(name, "/")
		if kind == "responses" && doc.Components.Responses[n] == nil {
			t.Errorf("components/%s is missing: lab/kit/apitest needs it", name)
		}
	}
}
