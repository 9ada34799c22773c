from django import forms
from django.core.exceptions import ValidationError

from apps.tenants.models import Methodology, Project
from apps.tenants.roles import API_KEY_SCOPES, ROLE_ORDER
from memorysaas.kernel.schemas import single_line


def _one_line(value: str) -> None:
    try:
        single_line(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=120, validators=[_one_line])
    description = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 3}))
    methodology = forms.ChoiceField(choices=Methodology.choices, initial=Methodology.NATIVE)


class InvitationForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(choices=[(r.value, r.value.title()) for r in ROLE_ORDER], initial="member")


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=[(r.value, r.value.title()) for r in ROLE_ORDER])


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=120, validators=[_one_line])
    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in API_KEY_SCOPES],
        widget=forms.CheckboxSelectMultiple,
        initial=["memories:read", "memories:write", "observer:write"],
    )
    project = forms.ModelChoiceField(
        queryset=Project.objects.none(), required=False, empty_label="All projects"
    )

    def __init__(self, *args, projects=None, **kwargs):
        super().__init__(*args, **kwargs)
        if projects is not None:
            self.fields["project"].queryset = projects
