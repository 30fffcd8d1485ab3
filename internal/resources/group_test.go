package resources

import "testing"

func TestGroupResources(t *testing.T) {
	bundle, err := FromFloats(map[string]float64{"CPU": 2, "GPU": 1})
	if err != nil {
		t.Fatal(err)
	}
	const pg = "abc123"
	committed := BundleResources(bundle, pg, 1)
	for name, want := range map[string]float64{
		"CPU_group_1_abc123": 2, "CPU_group_abc123": 2, "GPU_group_1_abc123": 1, "GPU_group_abc123": 1,
		"bundle_group_1_abc123": 1000, "bundle_group_abc123": 1000,
	} {
		if got := committed.Get(name); got != want {
			t.Errorf("BundleResources[%s] = %v, want %v", name, got, want)
		}
	}
	if len(committed) != 6 {
		t.Errorf("BundleResources has %d names, want 6: %v", len(committed), committed)
	}
	tests := []struct {
		name  string
		req   map[string]float64
		index int
		fits  bool
	}{
		{"a task within its bundle", map[string]float64{"CPU": 1}, 1, true},
		{"a task asking for nothing lands in the bundle", map[string]float64{}, 1, true},
		{"any bundle", map[string]float64{"GPU": 1}, -1, true},
		{"more than the bundle holds", map[string]float64{"CPU": 3}, 1, false},
		{"another bundle's index", map[string]float64{"CPU": 1}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := FromFloats(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			in := InGroup(req, pg, tt.index)
			if got := committed.Fits(in); got != tt.fits {
				t.Errorf("committed bundle fits %v = %v, want %v", in, got, tt.fits)
			}
			for name := range in {
				if !IsGroupName(name) {
					t.Errorf("InGroup produced %q, not a group name", name)
				}
			}
		})
	}
}
